package server

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/arbiter-dev/arbiter/server/ui"
)

// mountUI serves the pages under /ui behind authenticate, the API's own
// authentication; ui.Bridge lets a browser present its token as the login
// page's cookie. The login page and the static files (a stylesheet and a
// script, no data) are served without a token.
func (s *server) mountUI(r chi.Router, pages http.Handler) {
	r.Get("/ui/login", pages.ServeHTTP)
	r.Post("/ui/login", pages.ServeHTTP)
	r.Get("/ui/static/*", pages.ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(ui.Bridge("/ui"), s.authenticate, s.admitForm)
		r.Handle("/ui", pages)
		r.Handle("/ui/*", pages)
	})
}

// admitForm puts a form the pages decide (a what-if input of up to
// --max-body-bytes) under the API's admission budgets, so that the pages
// cannot be used to hold more than the API may: its declared length in
// bytes (the largest body the API takes when it declares none), and as
// many JSON values as that many bytes can hold, up to the per-input cap.
// Past either budget it is answered 503 overloaded, as the API is.
func (s *server) admitForm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		n := r.ContentLength
		if n < 0 || n > s.cfg.MaxBodyBytes {
			n = s.cfg.MaxBodyBytes
		}
		t := &ticket{a: s.adm}
		defer t.release()
		if !t.takeBytes(n) || !t.takeValues(min(n/2+1, s.cfg.MaxInputValues)) {
			writeError(w, s.overloaded(), false, "")
			return
		}
		next.ServeHTTP(w, r)
	})
}
