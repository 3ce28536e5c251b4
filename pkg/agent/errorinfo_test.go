package agent_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

type codedErr struct{}

func (codedErr) Error() string { return "over quota" }
func (codedErr) RunError() agent.RunError {
	return agent.RunError{Code: "QUOTA_EXCEEDED", Message: "tokens_per_day: 10 of 5"}
}

// TestErrorInfo: a CodedError keeps its code, wrapped or not; a model
// error keeps its; anything else is INTERNAL.
func TestErrorInfo(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want agent.RunError
	}{
		{"coded", codedErr{}, agent.RunError{Code: "QUOTA_EXCEEDED", Message: "tokens_per_day: 10 of 5"}},
		{"coded wrapped", fmt.Errorf("middleware quota: before_model: %w", codedErr{}), agent.RunError{Code: "QUOTA_EXCEEDED", Message: "tokens_per_day: 10 of 5"}},
		{"model", &model.Error{Code: model.CodeRateLimited, Message: "slow down", Retryable: true}, agent.RunError{Code: string(model.CodeRateLimited), Message: "slow down", Retryable: true}},
		{"other", errors.New("boom"), agent.RunError{Code: agent.CodeInternal, Message: "boom"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := agent.ErrorInfo(c.err); got != c.want {
				t.Fatalf("ErrorInfo = %+v, want %+v", got, c.want)
			}
		})
	}
}
