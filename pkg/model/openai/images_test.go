package openai

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// wireMessage is a request message as JSON: content is a string or an
// array of parts.
type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
}

type wirePart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// describe renders a content as "text" (a string) or as its parts, images
// as "image:<data URL>".
func describe(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var parts []wirePart
	if err := json.Unmarshal(raw, &parts); err != nil {
		t.Fatalf("content %s: %v", raw, err)
	}
	var out []string
	for _, p := range parts {
		switch p.Type {
		case "text":
			out = append(out, "text:"+p.Text)
		case "image_url":
			out = append(out, "image:"+p.ImageURL.URL)
		default:
			out = append(out, "?"+p.Type)
		}
	}
	return out
}

func TestGenerateImagesOnTheWire(t *testing.T) {
	srv := modeltest.New(t)
	srv.Script(modeltest.DefaultKey, modeltest.Text("ok"))
	m, _ := newTestModel(t, srv, nil)
	png := model.Image{MIMEType: "image/png", Data: []byte("\x89PNG\r\n\x1a\n-one")}
	gif := model.Image{MIMEType: "image/gif", Data: []byte("GIF89a-two")}
	jpg := model.Image{MIMEType: "image/jpeg", Data: []byte("\xff\xd8\xff-three")}
	url := func(img model.Image) string {
		return "image:data:" + img.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
	}
	req := model.Request{Messages: []model.Message{
		{Role: model.RoleSystem, Content: "sys"},
		{Role: model.RoleUser, Content: "look", Images: []model.Image{png}},
		{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "read_file", Args: `{}`}, {ID: "c2", Name: "ls", Args: `{}`}, {ID: "c3", Name: "read_file", Args: `{}`}}},
		{Role: model.RoleTool, ToolCallID: "c1", Name: "read_file", Content: "/a.png: image/png", Images: []model.Image{png}},
		{Role: model.RoleTool, ToolCallID: "c2", Name: "ls", Content: "/a.png"},
		{Role: model.RoleTool, ToolCallID: "c3", Name: "read_file", Content: "two images", Images: []model.Image{gif, jpg}},
		{Role: model.RoleUser, Content: "next"},
		{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c4", Name: "read_file", Args: `{}`}}},
		{Role: model.RoleTool, ToolCallID: "c4", Content: "/g.gif", Images: []model.Image{gif}},
	}}
	if _, err := m.Generate(testContext(t), req, nil); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	var body struct {
		Messages []wireMessage `json:"messages"`
	}
	if err := json.Unmarshal(srv.AllRequests()[0].Raw, &body); err != nil {
		t.Fatal(err)
	}
	type want struct {
		role, id string
		content  []string
	}
	wants := []want{
		{"system", "", []string{"sys"}},
		{"user", "", []string{"text:look", url(png)}},
		{"assistant", "", []string{""}},
		{"tool", "c1", []string{"/a.png: image/png"}},
		{"tool", "c2", []string{"/a.png"}},
		{"tool", "c3", []string{"two images"}},
		// The images of the tool block follow it in one user message.
		{"user", "", []string{"text:The image returned by tool call c1 (read_file):", url(png),
			"text:The 2 images returned by tool call c3 (read_file):", url(gif), url(jpg)}},
		{"user", "", []string{"next"}},
		{"assistant", "", []string{""}},
		{"tool", "c4", []string{"/g.gif"}},
		{"user", "", []string{"text:The image returned by tool call c4:", url(gif)}},
	}
	if len(body.Messages) != len(wants) {
		t.Fatalf("%d messages on the wire, want %d: %s", len(body.Messages), len(wants), srv.AllRequests()[0].Raw)
	}
	for i, w := range wants {
		g := body.Messages[i]
		content := []string{""}
		if len(g.Content) > 0 {
			content = describe(t, g.Content)
		}
		if g.Role != w.role || g.ToolCallID != w.id || len(content) != len(w.content) {
			t.Errorf("messages[%d] = %s %q %q, want %s %q %q", i, g.Role, g.ToolCallID, content, w.role, w.id, w.content)
			continue
		}
		for j := range content {
			if content[j] != w.content[j] {
				t.Errorf("messages[%d] part %d = %.80q, want %.80q", i, j, content[j], w.content[j])
			}
		}
	}
}

func TestGenerateImagesOnlyOnUserAndToolMessages(t *testing.T) {
	srv := modeltest.New(t)
	m, _ := newTestModel(t, srv, nil)
	img := []model.Image{{MIMEType: "image/png", Data: []byte("\x89PNG")}}
	for _, role := range []model.Role{model.RoleSystem, model.RoleAssistant} {
		_, err := m.Generate(testContext(t), model.Request{Messages: []model.Message{{Role: role, Content: "x", Images: img}}}, nil)
		if model.CodeOf(err) != model.CodeBadRequest {
			t.Errorf("%s message with an image: err = %v, want MODEL_BAD_REQUEST", role, err)
		}
	}
	if n := len(srv.AllRequests()); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
}
