package main

import (
	"context"
	"errors"
)

func runB5B6(ctx context.Context, e *env) ([]Row, error)  { return nil, errors.New("todo") }
func notRunB9(ctx context.Context, e *env) ([]Row, error) { return nil, errors.New("todo") }
