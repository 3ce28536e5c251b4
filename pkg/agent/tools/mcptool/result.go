package mcptool

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/plumbhq/plumb/pkg/agent"
)

// render turns a tools/call result into what the model sees: text parts
// as they are, other content summarized in one line each, structured
// content as JSON when there is nothing else, everything cut to max
// characters with a note. An isError result is an error result.
func render(server string, res *sdk.CallToolResult, max int) agent.ToolResult {
	var parts []string
	for _, c := range res.Content {
		parts = append(parts, contentText(c))
	}
	text := strings.Join(parts, "\n")
	if text == "" && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			text = string(b)
		}
	}
	if text == "" {
		text = "(no output)"
		if res.IsError {
			text = fmt.Sprintf("MCP server %s reported an error without a message", server)
		}
	}
	return agent.ToolResult{Content: truncate(text, max, server), IsError: res.IsError}
}

func contentText(c sdk.Content) string {
	switch c := c.(type) {
	case *sdk.TextContent:
		return c.Text
	case *sdk.ImageContent:
		return fmt.Sprintf("[image %s, %d bytes, not shown]", mimeOr(c.MIMEType), len(c.Data))
	case *sdk.AudioContent:
		return fmt.Sprintf("[audio %s, %d bytes, not shown]", mimeOr(c.MIMEType), len(c.Data))
	case *sdk.ResourceLink:
		s := "[resource link " + c.URI
		if c.Name != "" {
			s += " (" + c.Name + ")"
		}
		if c.Description != "" {
			s += ": " + c.Description
		}
		return s + "]"
	case *sdk.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return "[empty resource]"
		}
		if r.Text != "" {
			return fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text)
		}
		return fmt.Sprintf("[resource %s, %s, %d bytes, not shown]", r.URI, mimeOr(r.MIMEType), len(r.Blob))
	}
	return fmt.Sprintf("[%T content, not shown]", c)
}

func mimeOr(m string) string {
	if m == "" {
		return "of unknown type"
	}
	return m
}

// truncate keeps the first max characters of s and says what was cut.
func truncate(s string, max int, server string) string {
	n := utf8.RuneCountInString(s)
	if n <= max {
		return s
	}
	cut := 0
	for i := range s {
		if cut == max {
			s = s[:i]
			break
		}
		cut++
	}
	return fmt.Sprintf("%s\n[output cut: the first %d of %d characters are shown (MCP server %s's result limit); ask for less, e.g. a narrower query or a page]", s, max, n, server)
}
