// Command modreqs reads `go mod edit -json` on standard input and prints the
// module paths that go.mod requires directly (not marked // indirect), one a
// line. scripts/verify-mod.sh uses it to find requirements nothing imports.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

type goMod struct {
	Require []struct {
		Path     string
		Indirect bool
	}
}

func main() {
	var m goMod
	if err := json.NewDecoder(os.Stdin).Decode(&m); err != nil {
		fmt.Fprintln(os.Stderr, "modreqs: decode go mod edit -json:", err)
		os.Exit(1)
	}
	for _, r := range m.Require {
		if !r.Indirect {
			fmt.Println(r.Path)
		}
	}
}
