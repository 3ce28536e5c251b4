package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestLoopbackHostOnly(t *testing.T) {
	h := loopbackHostOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:9070", http.StatusNoContent},
		{"localhost:9070", http.StatusNoContent},
		{"[::1]:9070", http.StatusNoContent},
		{"127.0.0.2", http.StatusNoContent},
		{"evil.example:9070", http.StatusForbidden},
		{"10.0.0.1:9070", http.StatusForbidden},
		{"localhost.evil.example", http.StatusForbidden},
		{"", http.StatusForbidden},
	} {
		t.Run(tc.host, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/ui/", nil)
			r.Host = tc.host
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("Host %q: %d, want %d", tc.host, w.Code, tc.want)
			}
		})
	}
}
