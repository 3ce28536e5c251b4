package model

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestIsContextOverflow(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("boom"), false},
		{"overflow", &Error{Code: CodeContextOverflow}, true},
		{"wrapped overflow", fmt.Errorf("step 3: %w", &Error{Code: CodeContextOverflow}), true},
		{"other code", &Error{Code: CodeBadRequest}, false},
		{"context canceled", context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsContextOverflow(tt.err); got != tt.want {
				t.Errorf("IsContextOverflow(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestErrorMessageAndUnwrap(t *testing.T) {
	cause := errors.New("connection reset")
	err := &Error{Code: CodeUnavailable, Message: "after 4 attempts", Retryable: true, Err: cause}
	if got, want := err.Error(), "MODEL_UNAVAILABLE: after 4 attempts"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&Error{Code: CodeAuth, Err: cause}).Error(), "MODEL_AUTH: connection reset"; got != want {
		t.Errorf("Error() without message = %q, want %q", got, want)
	}
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(err, cause) = false, want true")
	}
	if got := CodeOf(fmt.Errorf("wrap: %w", err)); got != CodeUnavailable {
		t.Errorf("CodeOf = %q, want %q", got, CodeUnavailable)
	}
}

func TestUsageAdd(t *testing.T) {
	a := Usage{Prompt: 10, Completion: 5, Total: 15, Cached: 2, Reasoning: 1}
	b := Usage{Prompt: 1, Completion: 2, Total: 3, Estimated: true}
	got := a.Add(b)
	want := Usage{Prompt: 11, Completion: 7, Total: 18, Cached: 2, Reasoning: 1, Estimated: true}
	if got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
}
