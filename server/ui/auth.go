package ui

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// TokenCookie holds, for a browser, the bearer token that the API asks for.
const TokenCookie = "arbiter_token"

// Bridge lets a browser authenticate as an API client does: a request under
// prefix that carries no Authorization header but the login page's cookie
// gets the cookie's token as its bearer token, for the API's own
// authentication (which runs after Bridge) to accept or refuse. When that
// refuses (401), the browser is sent to the login page instead of the
// API's error document. Nothing else changes: the same tokens, compared
// the same way.
func Bridge(prefix string) func(http.Handler) http.Handler {
	prefix = cmp.Or(prefix, "/ui")
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasPrefix(r.URL.Path, prefix+"/") && r.URL.Path != prefix {
				next.ServeHTTP(w, r)
				return
			}
			if r.Header.Get("Authorization") == "" {
				if c, err := r.Cookie(TokenCookie); err == nil && c.Value != "" {
					r.Header.Set("Authorization", "Bearer "+c.Value)
				}
			}
			next.ServeHTTP(&loginRedirect{ResponseWriter: w, r: r, prefix: prefix}, r)
		})
	}
}

// loginRedirect turns the API's 401 into a redirect to the login page.
type loginRedirect struct {
	http.ResponseWriter
	r         *http.Request
	prefix    string
	redirect  bool
	committed bool
}

func (l *loginRedirect) WriteHeader(code int) {
	if l.committed {
		return
	}
	l.committed = true
	if code == http.StatusUnauthorized && l.r.Header.Get("Accept") != "text/event-stream" {
		l.redirect = true
		clear(l.ResponseWriter.Header())
		next := l.r.URL.RequestURI()
		if l.r.Method != http.MethodGet {
			next = l.prefix + "/decisions"
		}
		http.Redirect(l.ResponseWriter, l.r, l.prefix+"/login?next="+url.QueryEscape(next), http.StatusSeeOther)
		return
	}
	l.ResponseWriter.WriteHeader(code)
}

func (l *loginRedirect) Write(b []byte) (int, error) {
	if !l.committed {
		l.WriteHeader(http.StatusOK)
	}
	if l.redirect {
		return len(b), nil
	}
	return l.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushing the
// live stream, its write deadline).
func (l *loginRedirect) Unwrap() http.ResponseWriter { return l.ResponseWriter }

type loginData struct {
	Next   string
	Failed bool
}

// readForm parses r's form, reading at most limit bytes of its body, and
// answers an error page (413 past the limit, 400 otherwise) when it cannot.
func (h *handler) readForm(w http.ResponseWriter, r *http.Request, limit int64, title string) bool {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		status := http.StatusBadRequest
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			status = http.StatusRequestEntityTooLarge
		}
		h.render(w, r, status, "error", page{Title: title, Message: "The form could not be read: " + err.Error()})
		return false
	}
	return true
}

// maxLoginForm bounds the login form: a token and the page to go back to.
const maxLoginForm = 16 << 10

// login shows the token form and, posted, keeps the token in a cookie that
// only these pages receive (Path, HttpOnly, SameSite=Strict; Secure over
// TLS). Whether the token is good is decided by the API's authentication
// on the next page.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	// Anyone may post here, before any token is checked: the form (a token
	// and a path) is read within a few KiB, not Go's default of 10 MB.
	if !h.readForm(w, r, maxLoginForm, "Log in") {
		return
	}
	next := localNext(h.cfg.Prefix, r.FormValue("next"))
	if r.Method == http.MethodPost {
		if !sameOrigin(r) {
			h.render(w, r, http.StatusForbidden, "error", page{Title: "Refused", Message: "Log in from this page."})
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name: TokenCookie, Value: strings.TrimSpace(r.PostFormValue("token")), Path: h.cfg.Prefix,
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
		})
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	_, had := r.Cookie(TokenCookie)
	h.render(w, r, http.StatusOK, "login", page{Title: "Log in", Data: loginData{Next: next, Failed: had == nil}})
}

// localNext is next when it is one of these pages, else prefix+"/": a
// clean path under prefix (raw and percent-decoded) with no scheme, host,
// user, backslash, space or control character. Browsers read "/\host" and
// "/<tab>/host" as "//host", and http.Redirect cleans "/ui/../\host" to
// "/\host": a link that sent an engineer who had just logged in elsewhere.
func localNext(prefix, next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		strings.ContainsFunc(next+u.Path, func(r rune) bool { return r <= ' ' || r == '\\' || r == 0x7f }) ||
		!strings.HasPrefix(u.Path, prefix+"/") || path.Clean(u.Path) != strings.TrimSuffix(u.Path, "/") {
		return prefix + "/"
	}
	return next
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		h.render(w, r, http.StatusForbidden, "error", page{Title: "Refused", Message: "Log out from these pages."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: "", Path: h.cfg.Prefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, h.cfg.Prefix+"/login", http.StatusSeeOther)
}
