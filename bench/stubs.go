package main

import (
	"context"
	"errors"
)

func runB3(ctx context.Context, e *env) ([]Row, error)    { return nil, errors.New("todo") }
func runB7(ctx context.Context, e *env) ([]Row, error)    { return nil, errors.New("todo") }
func runB8(ctx context.Context, e *env) ([]Row, error)    { return nil, errors.New("todo") }
func runB10(ctx context.Context, e *env) ([]Row, error)   { return nil, errors.New("todo") }
func runB5B6(ctx context.Context, e *env) ([]Row, error)  { return nil, errors.New("todo") }
func notRunB9(ctx context.Context, e *env) ([]Row, error) { return nil, errors.New("todo") }
