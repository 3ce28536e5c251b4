package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Flags is a flag set whose every flag can also be given as an environment
// variable: flag "grpc-addr" of binary "agentd" reads AGENTD_GRPC_ADDR. A flag
// on the command line wins over the environment.
type Flags struct {
	fs     *flag.FlagSet
	binary string
	set    map[string]bool
}

// NewFlags returns an empty flag set for binary.
func NewFlags(binary string) *Flags {
	fs := flag.NewFlagSet(binary, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &Flags{fs: fs, binary: binary, set: map[string]bool{}}
}

// EnvName is the environment variable that stands for flag name.
func (f *Flags) EnvName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(f.binary+"_"+name, "-", "_"))
}

// String defines a string flag.
func (f *Flags) String(p *string, name, def, usage string) { f.fs.StringVar(p, name, def, usage) }

// Bool defines a boolean flag.
func (f *Flags) Bool(p *bool, name string, def bool, usage string) { f.fs.BoolVar(p, name, def, usage) }

// Int defines an integer flag.
func (f *Flags) Int(p *int, name string, def int, usage string) { f.fs.IntVar(p, name, def, usage) }

// Int64 defines a 64-bit integer flag.
func (f *Flags) Int64(p *int64, name string, def int64, usage string) {
	f.fs.Int64Var(p, name, def, usage)
}

// Float defines a floating-point flag.
func (f *Flags) Float(p *float64, name string, def float64, usage string) {
	f.fs.Float64Var(p, name, def, usage)
}

// Duration defines a duration flag that must not be negative.
func (f *Flags) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.fs.Var(durationValue{p}, name, usage)
}

// Addr defines a host:port flag, checked when it is set.
func (f *Flags) Addr(p *string, name, def, usage string) {
	*p = def
	f.fs.Var(addrValue{p}, name, usage)
}

// Enum defines a string flag that accepts only the listed values.
func (f *Flags) Enum(p *string, name, def string, allowed []string, usage string) {
	*p = def
	f.fs.Var(enumValue{p, allowed}, name, fmt.Sprintf("%s (%s)", usage, strings.Join(allowed, "|")))
}

// IsSet reports whether the flag was given on the command line or in the
// environment.
func (f *Flags) IsSet(name string) bool { return f.set[name] }

// Override is the one rule by which a flag and the config key that sets
// the same thing combine: the flag wins when it was given (on the command
// line or in the environment); otherwise the config file's value (*conf)
// stays; and when the file leaves the key unset (zero), the flag's default
// fills it. flag is the flag's variable after Parse.
func Override[T comparable](f *Flags, name string, flag T, conf *T) {
	var zero T
	if f.IsSet(name) || *conf == zero {
		*conf = flag
	}
}

// Parse parses args, then fills every flag not given on the command line
// from its environment variable (read with getenv). It returns flag.ErrHelp
// for -h/--help, and a one-line error naming the flag or variable otherwise.
func (f *Flags) Parse(args []string, getenv func(string) string) error {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%v (see %s --help)", err, f.binary)
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see %s --help)", f.fs.Arg(0), f.binary)
	}
	f.fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	var err error
	f.fs.VisitAll(func(fl *flag.Flag) {
		if err != nil || f.set[fl.Name] {
			return
		}
		env := f.EnvName(fl.Name)
		v := getenv(env)
		if v == "" {
			return
		}
		if serr := f.fs.Set(fl.Name, v); serr != nil {
			err = fmt.Errorf("invalid value %q for %s: %v", v, env, serr)
			return
		}
		f.set[fl.Name] = true
	})
	return err
}

// Usage writes the help text: every flag with its default and variable.
func (f *Flags) Usage(w io.Writer, summary string) {
	fmt.Fprintf(w, "%s\n\nUsage: %s [flags]\n\nFlags (each also settable through the environment variable shown):\n", summary, f.binary)
	var lines []string
	f.fs.VisitAll(func(fl *flag.Flag) {
		def := ""
		if fl.DefValue != "" && fl.DefValue != "false" {
			def = fmt.Sprintf(" (default %s)", fl.DefValue)
		}
		lines = append(lines, fmt.Sprintf("  --%s\n        %s%s [$%s]", fl.Name, fl.Usage, def, f.EnvName(fl.Name)))
	})
	sort.Strings(lines)
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

type addrValue struct{ p *string }

func (v addrValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v addrValue) Set(s string) error {
	if err := CheckAddr(s); err != nil {
		return err
	}
	*v.p = s
	return nil
}

// CheckAddr reports whether s is a usable host:port listen or dial address.
func CheckAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

type durationValue struct{ p *time.Duration }

func (v durationValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 30s or 2m")
	}
	if d < 0 {
		return fmt.Errorf("duration must not be negative")
	}
	*v.p = d
	return nil
}

type enumValue struct {
	p       *string
	allowed []string
}

func (v enumValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v enumValue) Set(s string) error {
	for _, a := range v.allowed {
		if s == a {
			*v.p = s
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(v.allowed, ", "))
}
