package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// webhooks runs `agentctl webhooks rotate-key|deliveries`. The new key is
// printed once, on stdout, as RotateWebhookKey returns it.
func (a *agentCmd) webhooks(ctx context.Context, args []string) error {
	fs := newFlags("webhooks")
	jsonOut := fs.Bool("json", false, "print protojson")
	grace := fs.String("grace", "", "rotate-key: how long the older keys keep signing (default: agentd's webhooks.key_grace; 0s: not at all)")
	thread := fs.String("thread", "", "deliveries: only this thread's")
	run := fs.String("run", "", "deliveries: only this run's")
	st := fs.String("status", "", "deliveries: pending, delivering, succeeded or failed")
	limit := fs.Int("limit", 0, "deliveries: page size (default 50)")
	page := fs.String("page-token", "", "deliveries: continue a listing")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("webhooks: want rotate-key or deliveries")
	}
	uctx, cancel := a.unary(ctx)
	defer cancel()
	switch pos[0] {
	case "rotate-key":
		req := &plumbv1.RotateWebhookKeyRequest{}
		if *grace != "" {
			d, err := time.ParseDuration(*grace)
			if err != nil {
				return fmt.Errorf("webhooks rotate-key: --grace: %w", err)
			}
			req.Grace = durationpb.New(d)
		}
		resp, err := a.c.RotateWebhookKey(uctx, req)
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		fmt.Fprintf(a.sio.out, "key %s (shown once; older keys sign until %s)\n%s\n", resp.GetKeyId(),
			resp.GetPreviousExpireTime().AsTime().Format(time.RFC3339), resp.GetKey())
		return nil
	case "deliveries":
		req := &plumbv1.ListWebhookDeliveriesRequest{ThreadId: *thread, RunId: *run, PageSize: int32(*limit), PageToken: *page}
		if *st != "" {
			v, ok := plumbv1.WebhookDeliveryStatus_value["WEBHOOK_DELIVERY_STATUS_"+strings.ToUpper(*st)]
			if !ok || v == 0 {
				return fmt.Errorf("webhooks deliveries: --status %q (want pending, delivering, succeeded or failed)", *st)
			}
			req.Status = plumbv1.WebhookDeliveryStatus(v)
		}
		resp, err := a.c.ListWebhookDeliveries(uctx, req)
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRUN\tEVENT\tSTATUS\tATTEMPTS\tLAST\tURL")
		for _, d := range resp.GetDeliveries() {
			last := fmt.Sprint(d.GetLastStatusCode())
			if d.GetLastError() != "" {
				last += " " + d.GetLastError()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.GetId(), d.GetRunId(), d.GetEvent(),
				strings.ToLower(strings.TrimPrefix(d.GetStatus().String(), "WEBHOOK_DELIVERY_STATUS_")), d.GetAttempts(), last, d.GetUrl())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if resp.GetNextPageToken() != "" {
			fmt.Fprintf(a.sio.out, "next page: --page-token %s\n", resp.GetNextPageToken())
		}
		return nil
	}
	return fmt.Errorf("webhooks: unexpected %q (want rotate-key or deliveries)", pos[0])
}
