// Command previewserver is the server the preview tests run inside a box:
// it listens on 127.0.0.1:PORT (the box's loopback, as a dev server
// would) and serves
//
//	/hello        "hello from the box", with a Set-Cookie the proxy must drop
//	/echo         the request's path, query and headers as text
//	/ws           a WebSocket that echoes every message
//
// It is built static by the tests and copied into the box.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/coder/websocket"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: previewserver PORT")
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "box", Value: "tracking", Path: "/"})
		w.Header().Set("Service-Worker-Allowed", "/")
		fmt.Fprint(w, "hello from the box")
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		fmt.Fprintf(&b, "path=%s\nquery=%s\nhost=%s\nremote=%s\n", r.URL.Path, r.URL.RawQuery, r.Host, r.RemoteAddr)
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "header %s: %s\n", k, strings.Join(r.Header[k], ", "))
		}
		fmt.Fprint(w, b.String())
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(4 << 20)
		ctx := context.Background()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	})
	srv := &http.Server{Addr: "127.0.0.1:" + os.Args[1], Handler: mux}
	fmt.Fprintln(os.Stderr, srv.ListenAndServe())
	os.Exit(1)
}
