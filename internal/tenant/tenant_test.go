package tenant

import (
	"context"
	"testing"
)

func TestValidAndFrom(t *testing.T) {
	for s, want := range map[string]bool{
		"default": true, "acme-1.prod_x": true, "0abc": true,
		"": false, "Acme": false, "-x": false, "a/b": false, "a b": false,
		"a234567890123456789012345678901234567890123456789012345678901234": false,
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %v", s, got)
		}
	}
	if From(context.Background()) != Default || From(With(context.Background(), "acme")) != "acme" {
		t.Fatal("From does not return the context's tenant or the default")
	}
	if Norm("") != Default || Norm("x") != "x" {
		t.Fatal("Norm")
	}
}

func TestOperator(t *testing.T) {
	ctx := context.Background()
	if Operator(ctx) || Operator(WithOwnScope(ctx)) {
		t.Fatal("an unmarked context is an operator's")
	}
	op := WithOperator(With(ctx, "ops"))
	if !Operator(op) || From(op) != "ops" {
		t.Fatalf("operator context: operator=%v tenant=%q", Operator(op), From(op))
	}
}
