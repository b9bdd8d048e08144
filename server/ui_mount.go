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
func mountUI(r chi.Router, pages http.Handler, authenticate func(http.Handler) http.Handler) {
	r.Get("/ui/login", pages.ServeHTTP)
	r.Post("/ui/login", pages.ServeHTTP)
	r.Get("/ui/static/*", pages.ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(ui.Bridge("/ui"), authenticate)
		r.Handle("/ui", pages)
		r.Handle("/ui/*", pages)
	})
}
