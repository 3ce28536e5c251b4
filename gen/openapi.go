// Package gen embeds the OpenAPI (Swagger 2.0) documents `make generate`
// writes to gen/openapiv2 with protoc-gen-openapiv2, one per service file;
// the daemons serve theirs at GET /openapi.json (docs/http.md). The Go
// code generated from the protos lives in gen/go (the messages and gRPC
// stubs every binary links) and gen/gateway (the HTTP/JSON gateway only the
// daemons link). This file is written by hand; buf cleans only the
// generated directories below it.
package gen

import _ "embed"

// AgentOpenAPI is the OpenAPI document of plumb.v1.AgentService.
//
//go:embed openapiv2/plumb/v1/agent.swagger.json
var AgentOpenAPI []byte

// SandboxOpenAPI is the OpenAPI document of plumb.v1.SandboxService.
//
//go:embed openapiv2/plumb/v1/sandbox.swagger.json
var SandboxOpenAPI []byte
