package deep_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// pngImage is a small file with the PNG signature.
var pngImage = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR-not-really-pixels")

// wireContent renders the messages of a request as the endpoint received
// them: "role(tool_call_id): text" for string contents, and one
// "role: [text|image] …" entry per part for part arrays.
func wireContent(t *testing.T, r modeltest.Request) []string {
	t.Helper()
	var body struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(r.Raw, &body); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range body.Messages {
		who := m.Role
		if m.ToolCallID != "" {
			who += "(" + m.ToolCallID + ")"
		}
		var text string
		if len(m.Content) == 0 || json.Unmarshal(m.Content, &text) == nil {
			out = append(out, who+": "+text)
			continue
		}
		var parts []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			t.Fatalf("content %s: %v", m.Content, err)
		}
		for _, p := range parts {
			if p.Type == "image_url" {
				out = append(out, who+": [image] "+p.ImageURL.URL)
			} else {
				out = append(out, who+": [text] "+p.Text)
			}
		}
	}
	return out
}

func readDescription(r modeltest.Request) string {
	for _, tl := range r.Body.Tools {
		if tl.Function.Name == "read_file" {
			return tl.Function.Description
		}
	}
	return ""
}

// TestReadImage: read_file of an image shows it to a vision-capable model
// as an image part, and gives other models a placeholder (issue 8, B12).
func TestReadImage(t *testing.T) {
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngImage)
	attached := fmt.Sprintf("/img.png: image/png, %d bytes. The image is attached.", len(pngImage))
	placeholder := fmt.Sprintf("/img.png: image/png, %d bytes. This file is binary media; its content cannot be shown in this conversation.", len(pngImage))
	pdf := "/doc.pdf: application/pdf, 12 bytes. This file is binary media; its content cannot be shown in this conversation."
	cases := []struct {
		name   string
		vision bool
		want   []string // request 2 after the system prompt and the user message
		shown  bool     // read_file's description says images are shown
	}{
		{"vision model", true, []string{
			"assistant: ",
			"tool(c1): " + attached,
			"tool(c2): " + pdf,
			"user: [text] The image returned by tool call c1 (read_file):",
			"user: [image] " + dataURL,
		}, true},
		{"model without vision", false, []string{
			"assistant: ",
			"tool(c1): " + placeholder,
			"tool(c2): " + pdf,
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var opts []option
			if c.vision {
				opts = append(opts, withVision(smartModel))
			}
			e := newEnv(t, append(opts, withFiles())...)
			e.seed = map[string][]byte{"/img.png": pngImage, "/doc.pdf": []byte("%PDF-1.4\n...")}
			e.srv.Script("main",
				modeltest.Calls(call("c1", "read_file", `{"file_path":"/img.png"}`), call("c2", "read_file", `{"file_path":"/doc.pdf"}`)),
				modeltest.Text("a PNG"))
			tr := e.run(input("what is in /img.png?")).must(t)
			tr.finished(t, agent.StatusCompleted)
			reqs := e.srv.Requests("main")
			if len(reqs) != 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			got := wireContent(t, reqs[1])[2:]
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("request 2 =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if r := tr.result(t, "c1"); r.IsError || r.Content != strings.TrimPrefix(c.want[1], "tool(c1): ") {
				t.Errorf("tool_result c1 %+v", r)
			}
			if d := readDescription(reqs[0]); strings.Contains(d, "are shown to you") != c.shown {
				t.Errorf("read_file description: %s", d)
			}
		})
	}
}

// TestImageNotSentToAModelWithoutVision: an image read by a vision-capable
// model stays in the thread; a later run on a model without vision gets a
// note instead of the image.
func TestImageNotSentToAModelWithoutVision(t *testing.T) {
	e := newEnv(t, withVision(smartModel), withFiles())
	e.seed = map[string][]byte{"/img.png": pngImage}
	e.srv.Script("main", modeltest.Calls(call("c1", "read_file", `{"file_path":"/img.png"}`)), modeltest.Text("a PNG"))
	tr := e.run(input("look")).must(t)
	tr.finished(t, agent.StatusCompleted)
	var stored []model.Image
	for _, m := range e.thread(tr.res.ThreadID).Messages {
		if m.ToolCallID == "c1" {
			stored = m.Images
		}
	}
	if len(stored) != 1 || stored[0].MIMEType != "image/png" || string(stored[0].Data) != string(pngImage) {
		t.Fatalf("stored images %+v", stored)
	}

	e.srv.Script("main", modeltest.Text("ok"))
	tr2 := e.run(agent.RunInput{ThreadID: tr.res.ThreadID, Input: []string{"again"}, Spec: agent.RunSpec{Model: "fast"}}).must(t)
	tr2.finished(t, agent.StatusCompleted)
	req := e.srv.Requests("main")[2]
	if req.Body.Model != fastModel {
		t.Fatalf("request went to %q", req.Body.Model)
	}
	if strings.Contains(string(req.Raw), "image_url") {
		t.Errorf("an image was sent to a model without vision: %.300s", req.Raw)
	}
	want := fmt.Sprintf("tool(c1): /img.png: image/png, %d bytes. The image is attached.\n\n[The image is not shown: this model does not accept images.]", len(pngImage))
	got := wireContent(t, req)
	if len(got) < 4 || got[3] != want {
		t.Errorf("request = %q\nwant [3] = %q", got, want)
	}
}
