// Command ptraceprobe is box code for TestServiceSecretsOutOfReach: it
// tries what a process needs ptrace access for against the pid given as
// its argument and prints one line per attempt, "<what>: ok" or
// "<what>: <error>".
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

func main() {
	pid, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Println("usage: ptraceprobe PID")
		os.Exit(2)
	}
	report := func(what string, err error) {
		if err == nil {
			fmt.Println(what + ": ok")
			return
		}
		fmt.Printf("%s: %v\n", what, err)
	}
	err = syscall.PtraceAttach(pid)
	report("attach", err)
	if err == nil {
		_ = syscall.PtraceDetach(pid)
	}
	_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, 0x4206 /* PTRACE_SEIZE */, uintptr(pid), 0, 0, 0, 0)
	if e != 0 {
		report("seize", e)
	} else {
		report("seize", nil)
		_ = syscall.PtraceDetach(pid)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	report("mem", err)
	if err == nil {
		mem.Close()
	}
}
