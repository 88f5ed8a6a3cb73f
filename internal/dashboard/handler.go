package dashboard

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
)

// page holds the page: plain HTML, CSS and JavaScript, no build step.
//
//go:embed page/index.html page/dashboard.js page/dashboard.css
var page embed.FS

// Register serves the page, /api/status and /api/cluster on mux.
func (v *Viewer) Register(mux *http.ServeMux) {
	files, err := fs.Sub(page, "page")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	static := http.FileServerFS(files)
	mux.Handle("GET /{$}", static)
	mux.Handle("GET /dashboard.js", static)
	mux.Handle("GET /dashboard.css", static)
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, v.cfg.Self()) })
	mux.HandleFunc("GET /api/cluster", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, v.Cluster(r.Context())) })
}

func writeJSON(w http.ResponseWriter, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(body)
}
