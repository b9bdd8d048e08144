package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/arbiter-dev/arbiter/engine"
)

// Token is one accepted bearer token. Caller is the identity that the
// decision log records for requests carrying it.
type Token struct {
	Caller string
	Secret []byte
}

// ParseTokenFile reads a token file: one token a line, either "CALLER TOKEN"
// or just "TOKEN" (the caller is then "token-" and the first 8 hex digits of
// the token's SHA-256). Blank lines and lines starting with '#' are ignored.
//
// A file without any token is an error: an operator who points the server
// at a token file means to turn authentication on, and an emptied file must
// not silently turn it off. Errors name lines, never token text.
func ParseTokenFile(data []byte) ([]Token, error) {
	var tokens []Token
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var caller, secret string
		switch f := strings.Fields(line); len(f) {
		case 1:
			secret = f[0]
			sum := sha256.Sum256([]byte(secret))
			caller = "token-" + hex.EncodeToString(sum[:4])
		case 2:
			caller, secret = f[0], f[1]
		default:
			return nil, fmt.Errorf("token file line %d: want \"CALLER TOKEN\" or \"TOKEN\", got %d fields", n, len(f))
		}
		sum := sha256.Sum256([]byte(secret))
		if first, dup := seen[sum]; dup {
			return nil, fmt.Errorf("token file line %d: duplicate token (first on line %d)", n, first)
		}
		seen[sum] = n
		tokens = append(tokens, Token{Caller: caller, Secret: []byte(secret)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if len(tokens) == 0 {
		return nil, errors.New("token file holds no token")
	}
	return tokens, nil
}

type callerKey struct{}

// callerOf returns the identity that authenticate attached to the request.
func callerOf(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

// authenticator checks bearer tokens. Only SHA-256 digests are kept, so
// every comparison is between equal-length values.
type authenticator struct {
	digests [][sha256.Size]byte
	callers []string
}

func newAuthenticator(tokens []Token) *authenticator {
	if len(tokens) == 0 {
		return nil
	}
	a := &authenticator{}
	for _, t := range tokens {
		a.digests = append(a.digests, sha256.Sum256(t.Secret))
		a.callers = append(a.callers, t.Caller)
	}
	return a
}

// match returns the caller of a presented token. It compares against every
// token, with no early exit, so timing does not tell which one (or whether
// any) matched. An empty token never matches, even an empty secret.
func (a *authenticator) match(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.digests {
		if subtle.ConstantTimeCompare(sum[:], a.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 || token == "" {
		return "", false
	}
	return a.callers[found], true
}

// authenticate requires a valid bearer token when tokens are configured and
// attaches the caller's identity: the token's caller, or else the common
// name of a verified TLS client certificate. The Authorization header is
// never logged.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var caller string
		if s.auth != nil {
			token, ok := bearer(r.Header.Get("Authorization"))
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="arbiter"`)
				writeError(w, &engine.Error{Code: engine.CodeUnauthorized, Message: "a bearer token is required (Authorization: Bearer TOKEN; the arbiter commands send ARBITER_TOKEN)"}, isDataAPI(r), "")
				return
			}
			if caller, ok = s.auth.match(token); !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="arbiter", error="invalid_token"`)
				writeError(w, &engine.Error{Code: engine.CodeUnauthorized, Message: "the bearer token is not valid (it is none of --auth-token-file's; the arbiter commands send ARBITER_TOKEN)"}, isDataAPI(r), "")
				return
			}
		}
		if caller == "" && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			caller = r.TLS.VerifiedChains[0][0].Subject.CommonName
		}
		if caller != "" {
			r = r.WithContext(context.WithValue(r.Context(), callerKey{}, caller))
		}
		next.ServeHTTP(w, r)
	})
}

// bearer extracts the token of an "Authorization: Bearer <token>" header;
// the scheme is case-insensitive (RFC 9110).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
