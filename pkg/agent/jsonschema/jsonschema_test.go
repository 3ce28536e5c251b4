package jsonschema

import (
	"errors"
	"testing"
)

const todosSchema = `{"type":"object","required":["todos"],"additionalProperties":false,"properties":{
  "todos":{"type":"array","maxItems":2,"items":{"type":"object","required":["content","status"],"additionalProperties":false,
    "properties":{"content":{"type":"string","minLength":1,"maxLength":5},
                  "status":{"type":"string","enum":["pending","in_progress","completed"]}}}}}}`

const readSchema = `{"type":"object","required":["file_path"],"additionalProperties":false,"properties":{
  "file_path":{"type":"string"},"offset":{"type":"integer"},"limit":{"type":"integer","minimum":0},
  "glob":{"type":["string","null"]},"regex":{"type":"boolean"},"max_count":{"type":"integer","minimum":1,"maximum":10000}}}`

func TestValidate(t *testing.T) {
	tests := []struct {
		name, schema, doc string
		want              string // coerced output; "" = same as doc
		err               string
	}{
		{"ok", readSchema, `{"file_path":"/a","offset":3}`, "", ""},
		{"missing required", readSchema, `{"offset":3}`, "", "file_path: required field is missing"},
		{"wrong type", readSchema, `{"file_path":3}`, "", "file_path: must be a string (got integer)"},
		{"unknown field", readSchema, `{"file_path":"/a","bogus":1}`, "", "bogus: unknown field (allowed: file_path, glob, limit, max_count, offset, regex)"},
		{"integer from string", readSchema, `{"file_path":"/a","offset":"7"}`, `{"file_path":"/a","offset":7}`, ""},
		{"integer from whole float", readSchema, `{"file_path":"/a","limit":10.0}`, `{"file_path":"/a","limit":10}`, ""},
		{"integer from fraction", readSchema, `{"file_path":"/a","limit":1.5}`, "", "limit: must be an integer (got number)"},
		{"boolean from string", readSchema, `{"file_path":"/a","regex":"true"}`, `{"file_path":"/a","regex":true}`, ""},
		{"boolean bad string", readSchema, `{"file_path":"/a","regex":"yes"}`, "", "regex: must be a boolean (got string)"},
		{"minimum", readSchema, `{"file_path":"/a","limit":-1}`, "", "limit: must be ≥ 0 (got -1)"},
		{"maximum", readSchema, `{"file_path":"/a","max_count":10001}`, "", "max_count: must be ≤ 10000 (got 10001)"},
		{"nullable", readSchema, `{"file_path":"/a","glob":null}`, "", ""},
		{"null optional dropped", readSchema, `{"file_path":"/a","offset":null}`, `{"file_path":"/a"}`, ""},
		{"root not object", readSchema, `[1]`, "", "must be an object (got array)"},
		{"enum", todosSchema, `{"todos":[{"content":"a","status":"done"}]}`, "", `todos[0].status: must be one of "pending", "in_progress", "completed" (got "done")`},
		{"minLength", todosSchema, `{"todos":[{"content":"","status":"pending"}]}`, "", "todos[0].content: must not be empty"},
		{"maxLength", todosSchema, `{"todos":[{"content":"abcdef","status":"pending"}]}`, "", "todos[0].content: must be at most 5 characters long (got 6)"},
		{"maxItems", todosSchema, `{"todos":[{"content":"a","status":"pending"},{"content":"a","status":"pending"},{"content":"a","status":"pending"}]}`, "", "todos: must have at most 2 items (got 3)"},
		{"nested unknown", todosSchema, `{"todos":[{"content":"a","status":"pending","x":1}]}`, "", "todos[0].x: unknown field (allowed: content, status)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustCompile(tt.schema)
			out, err := s.ValidateJSON([]byte(tt.doc))
			if tt.err != "" {
				var ve *ValidationError
				if !errors.As(err, &ve) || ve.Error() != tt.err {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			want := tt.want
			if want == "" {
				want = tt.doc
			}
			if string(out) != want {
				t.Errorf("out = %s, want %s", out, want)
			}
		})
	}
}

func TestValidateJSONSyntax(t *testing.T) {
	s := MustCompile(readSchema)
	for _, doc := range []string{`{"file_path":"/a`, `{} {}`, ``} {
		if _, err := s.ValidateJSON([]byte(doc)); !errors.Is(err, ErrNotJSON) {
			t.Errorf("%q: err = %v, want ErrNotJSON", doc, err)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, doc := range []string{`{"type":"bogus"}`, `{"type":3}`, `{"properties":{"a":{"type":"x"}}}`, `[`} {
		if _, err := Compile([]byte(doc)); err == nil {
			t.Errorf("%s: compiled", doc)
		}
	}
	if s, err := Compile(nil); err != nil || s == nil {
		t.Errorf("empty schema: %v", err)
	}
	// Unknown keywords are ignored.
	if _, err := Compile([]byte(`{"type":"object","oneOf":[{}],"description":"x"}`)); err != nil {
		t.Error(err)
	}
}
