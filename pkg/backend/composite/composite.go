package composite

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Composite is a routing backend (docs/file-tools.md §5): paths under a route prefix go to
// that route's backend, everything else to the default backend.
//
// New returns a Composite whose dynamic type also implements
// backend.Executor exactly when the default backend does, so consumers
// that probe for an executor (the tool layer hides execute without one)
// see the truth. That is why New returns an interface and not a struct
// pointer: Go method sets are static.
type Composite interface {
	backend.Backend
	// Home is the default backend's home dir.
	Home() string
	// ArtifactsRoot is the normalized directory under which the tool
	// layer writes large_tool_results; it is routed like any path.
	ArtifactsRoot() string
	// Resolve normalizes path and returns the backend that owns it and
	// the path within that backend (docs/file-tools.md §5 "Route choice").
	Resolve(path string) (b backend.Backend, backendPath string, err error)
	// Default returns the default backend.
	Default() backend.Backend
	// Routes returns a copy of the route table, prefix → backend.
	Routes() map[string]backend.Backend
}

// ErrInvalidRoute is wrapped by every construction error about a route.
var ErrInvalidRoute = errors.New("composite: invalid route")

// route is one mounted backend.
type route struct {
	prefix string // "/memories/"
	mount  string // "/memories"
	b      backend.Backend
}

// router implements Composite without Execute.
type router struct {
	def       backend.Backend
	routes    []*route // by prefix, ascending: the fixed order of docs/file-tools.md §5
	longest   []*route // by prefix length, descending: route choice
	artifacts string
}

// execRouter is a router whose default backend executes commands.
type execRouter struct {
	*router
	exec backend.Executor
}

var (
	_ Composite        = (*router)(nil)
	_ Composite        = (*execRouter)(nil)
	_ backend.Executor = (*execRouter)(nil)
)

// New builds a Composite over the default backend def and routes (prefix
// → backend). Each prefix must be a normalized path followed by "/"
// ("/memories/"), and not "/". Because routes is a map, a prefix cannot
// appear twice. artifactsRoot is normalized ("" means "/").
func New(def backend.Backend, routes map[string]backend.Backend, artifactsRoot string) (Composite, error) {
	if def == nil {
		return nil, errors.New("composite: the default backend is nil")
	}
	r := &router{def: def}
	for prefix, b := range routes {
		if b == nil {
			return nil, fmt.Errorf("%w: %q: the backend is nil", ErrInvalidRoute, prefix)
		}
		if err := checkPrefix(prefix); err != nil {
			return nil, err
		}
		r.routes = append(r.routes, &route{prefix: prefix, mount: prefix[:len(prefix)-1], b: b})
	}
	slices.SortFunc(r.routes, func(a, b *route) int { return strings.Compare(a.prefix, b.prefix) })
	for i := 1; i < len(r.routes); i++ {
		if r.routes[i].prefix == r.routes[i-1].prefix { // cannot happen with map keys; kept as the rule of docs/file-tools.md §5
			return nil, fmt.Errorf("%w: %q: duplicate prefix", ErrInvalidRoute, r.routes[i].prefix)
		}
	}
	r.longest = slices.Clone(r.routes)
	slices.SortStableFunc(r.longest, func(a, b *route) int { return len(b.prefix) - len(a.prefix) })

	if artifactsRoot == "" {
		artifactsRoot = "/"
	}
	root, err := vpath.Normalize(artifactsRoot)
	if err != nil {
		return nil, fmt.Errorf("composite: artifacts root: %w", err)
	}
	r.artifacts = root

	if ex, ok := def.(backend.Executor); ok {
		return &execRouter{router: r, exec: ex}, nil
	}
	return r, nil
}

// checkPrefix enforces docs/file-tools.md §5: normalized, starts and ends with "/", not "/".
func checkPrefix(prefix string) error {
	switch {
	case prefix == "/":
		return fmt.Errorf("%w: %q: the root cannot be a route; use it as the default backend", ErrInvalidRoute, prefix)
	case !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/"):
		return fmt.Errorf("%w: %q: a prefix must start and end with \"/\" (e.g. \"/memories/\")", ErrInvalidRoute, prefix)
	}
	n, err := vpath.Normalize(prefix)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrInvalidRoute, prefix, err)
	}
	if n+"/" != prefix {
		return fmt.Errorf("%w: %q: not normalized; use %q", ErrInvalidRoute, prefix, n+"/")
	}
	return nil
}

func (c *router) Home() string             { return backend.Home(c.def) }
func (c *router) ArtifactsRoot() string    { return c.artifacts }
func (c *router) Default() backend.Backend { return c.def }
func (c *router) Routes() map[string]backend.Backend {
	m := make(map[string]backend.Backend, len(c.routes))
	for _, r := range c.routes {
		m[r.prefix] = r.b
	}
	return m
}

// Resolve implements Composite.
func (c *router) Resolve(path string) (backend.Backend, string, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return nil, "", err
	}
	r, bp := c.resolve(p)
	return c.backendOf(r), bp, nil
}

// resolve returns the route owning the normalized path p (nil for the
// default) and the path within it.
func (c *router) resolve(p string) (*route, string) {
	for _, r := range c.longest {
		if p == r.mount {
			return r, "/"
		}
		if strings.HasPrefix(p, r.prefix) {
			return r, "/" + p[len(r.prefix):]
		}
	}
	return nil, p
}

func (c *router) backendOf(r *route) backend.Backend {
	if r == nil {
		return c.def
	}
	return r.b
}

// full maps a path reported by r's backend back to the composite path.
func full(r *route, bp string) string {
	switch {
	case r == nil:
		return bp
	case bp == "/":
		return r.mount
	}
	return r.mount + bp
}

// below returns the routes mounted strictly below the normalized path p,
// in prefix order.
func (c *router) below(p string) []*route {
	var out []*route
	for _, r := range c.routes {
		if p == "/" || strings.HasPrefix(r.mount, p+"/") {
			out = append(out, r)
		}
	}
	return out
}

// hasMountBelow reports whether a route is mounted strictly below p; p is
// then a directory of the composite tree whatever its owner holds.
func (c *router) hasMountBelow(p string) bool {
	for _, r := range c.routes {
		if p == "/" || strings.HasPrefix(r.mount, p+"/") {
			return true
		}
	}
	return false
}

// visible reports whether a path reported (after mapping) by the backend
// of route r is part of the composite tree: r must own it (not a more
// specific route), and no route may be mounted below it (that makes it a
// directory, shadowing a file there).
func (c *router) visible(r *route, p string) bool {
	owner, _ := c.resolve(p)
	return owner == r && !c.hasMountBelow(p)
}

// mapErr maps the path of an error from r's backend back to the composite
// path: Path, and the path where the message names it. Other errors pass
// through.
func mapErr(r *route, err error) error {
	if r == nil || err == nil {
		return err
	}
	var be *backend.Error
	if !errors.As(err, &be) {
		return err
	}
	return mapBackendErr(r, be)
}

func mapBackendErr(r *route, be *backend.Error) *backend.Error {
	if r == nil || be == nil || !strings.HasPrefix(be.Path, "/") {
		return be
	}
	c := *be
	c.Details = maps.Clone(be.Details)
	c.Path = full(r, be.Path)
	// Messages show paths cut by backend.Clip.
	c.Message = rewritePath(be.Message, backend.Clip(be.Path), backend.Clip(c.Path))
	return &c
}

// rewritePath replaces the occurrences of the path from in msg that stand
// as a path of their own (not inside a longer name) with to.
func rewritePath(msg, from, to string) string {
	var b strings.Builder
	for i := 0; i < len(msg); {
		j := strings.Index(msg[i:], from)
		if j < 0 {
			b.WriteString(msg[i:])
			break
		}
		j += i
		end := j + len(from)
		b.WriteString(msg[i:j])
		if (j == 0 || strings.IndexByte(" \"'`([", msg[j-1]) >= 0) &&
			(end == len(msg) || strings.IndexByte(" \"'`)]:;,/", msg[end]) >= 0) {
			b.WriteString(to)
		} else {
			b.WriteString(from)
		}
		i = end
	}
	return b.String()
}

// errIsDir is the error for a file operation on a path that is a
// directory of the composite tree because a route is mounted below it.
func errIsDir(op, p string) error { return backend.FromOS(op, p, syscall.EISDIR) }
