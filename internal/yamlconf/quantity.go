package yamlconf

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Quantity is a byte size written as a plain count or a number with a
// Ki/Mi/Gi/Ti (powers of 1024) or K/M/G/T (powers of 1000) suffix:
// "512Mi", "1.5Gi", "1G", 1073741824.
type Quantity int64

// UnmarshalYAML parses the size.
func (q *Quantity) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a size such as 512Mi or 1Gi")
	}
	if n.Tag == "!!null" {
		*q = 0
		return nil
	}
	v, err := ParseQuantity(n.Value)
	if err != nil {
		return err
	}
	*q = Quantity(v)
	return nil
}

var quantityRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?)?$`)

var quantityUnits = map[string]float64{"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}

// ParseQuantity parses "512Mi", "1Gi", "1G" or a plain byte count. Negative
// sizes, other units and sizes past 2^63 bytes are errors; a fraction of a
// byte is dropped.
func ParseQuantity(s string) (int64, error) {
	m := quantityRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("size %q: want bytes or a number with Ki, Mi, Gi or Ti (or K, M, G, T)", s)
	}
	if m[2] == "" && !strings.Contains(m[1], ".") {
		v, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return v, nil
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	f *= quantityUnits[m[2]]
	if f >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(f), nil
}
