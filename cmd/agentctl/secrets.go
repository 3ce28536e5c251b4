package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/secrets"
)

// secrets runs `agentctl secrets put|list|delete`. A value is read from
// stdin, never from the command line (where shell history and ps would
// keep it), and never printed.
func (a *agentCmd) secrets(ctx context.Context, args []string) error {
	fs := newFlags("secrets")
	jsonOut := fs.Bool("json", false, "print protojson")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return errors.New("secrets: want put NAME (value on stdin), list, or delete NAME")
	}
	uctx, cancel := a.unary(ctx)
	defer cancel()
	switch verb := pos[0]; {
	case verb == "list" && len(pos) == 1:
		resp, err := a.c.ListSecrets(uctx, &plumbv1.ListSecretsRequest{})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCREATED\tUPDATED")
		for _, s := range resp.GetSecrets() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.GetName(), s.GetCreateTime().AsTime().Format(time.RFC3339), s.GetUpdateTime().AsTime().Format(time.RFC3339))
		}
		return tw.Flush()
	case verb == "put" && len(pos) == 2:
		value, err := readSecret(a.sio.in)
		if err != nil {
			return err
		}
		resp, err := a.c.PutSecret(uctx, &plumbv1.PutSecretRequest{Name: pos[1], Value: value})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		what := "updated"
		if resp.GetCreated() {
			what = "created"
		}
		fmt.Fprintf(a.sio.out, "secret %s %s\n", resp.GetSecret().GetName(), what)
		return nil
	case verb == "delete" && len(pos) == 2:
		if _, err := a.c.DeleteSecret(uctx, &plumbv1.DeleteSecretRequest{Name: pos[1]}); err != nil {
			return rpcError(err)
		}
		fmt.Fprintf(a.sio.out, "secret %s deleted\n", pos[1])
		return nil
	}
	return fmt.Errorf("secrets: unexpected %q (want put NAME, list, or delete NAME)", strings.Join(pos, " "))
}

// readSecret reads a value from r: everything up to EOF, without one
// trailing newline.
func readSecret(r io.Reader) (string, error) {
	if r == nil {
		return "", errors.New("secrets put: give the value on stdin")
	}
	b, err := io.ReadAll(io.LimitReader(bufio.NewReader(r), secrets.MaxValueBytes+2))
	if err != nil {
		return "", fmt.Errorf("secrets put: read stdin: %w", err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", errors.New("secrets put: the value on stdin is empty")
	}
	return v, nil
}
