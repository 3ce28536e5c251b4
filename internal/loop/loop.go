package loop

import (
	"context"
	"sync"
	"time"
)

// Loop is a running periodic pass. The zero value and nil are stopped
// loops: Stop on them does nothing.
type Loop struct {
	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs pass at once and then every interval until Stop; pass gets a
// context that Stop cancels.
func Start(interval time.Duration, pass func(ctx context.Context)) *Loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			pass(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return l
}

// Stop ends the loop and waits for a pass in flight; again is fine.
func (l *Loop) Stop() {
	if l == nil || l.cancel == nil {
		return
	}
	l.once.Do(func() {
		l.cancel()
		<-l.done
	})
}
