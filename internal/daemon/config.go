package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadYAML decodes the YAML file at path into v strictly: unknown keys and
// type mismatches are errors that name the line. An empty file leaves v as
// it is.
func LoadYAML(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		// yaml lists several problems on separate lines; keep the error on one.
		msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", ";")), " ")
		return fmt.Errorf("config file %s: %s", path, msg)
	}
	return nil
}
