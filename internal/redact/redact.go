// Package redact is the one way a configured URL that may carry a secret
// (a bundle URL presigned in its query, a decision store's password) is
// shown: in logs, status, metrics labels and the pages. What a URL may
// hide is its user's password, every query value (X-Amz-Signature=,
// token=, password=: which of them is a secret is not ours to guess) and
// its fragment; its scheme, user name, host, path and query keys stay
// readable.
package redact

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
)

// Mask replaces each value hidden.
const Mask = "xxxxx"

// URL returns raw as it may be shown: In(raw, raw). A string that is not
// a URL with a scheme cannot be taken apart, so it is not shown at all.
func URL(raw string) string { return In(raw, raw) }

// In returns text (an error message, a log line, raw itself) with the
// secrets of the URL raw replaced by Mask wherever text quotes them: Go's
// and OPA's HTTP errors quote the URL they fetched whole. When raw does
// not parse as a URL with a scheme, raw is replaced whole.
func In(text, raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		if raw == "" {
			return text
		}
		return strings.ReplaceAll(text, raw, "(a string that is not a URL)")
	}
	var pairs []string
	if i := strings.IndexByte(raw, '#'); i >= 0 && i < len(raw)-1 {
		pairs = append(pairs, raw[i:], "#"+Mask)
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok {
				parts[i] = k + "=" + Mask
			} else if p != "" {
				parts[i] = Mask // a bare value: ?SECRET
			}
		}
		pairs = append(pairs, "?"+u.RawQuery, "?"+strings.Join(parts, "&"))
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		// As raw writes it (escaped), and as a message may quote it.
		if _, rest, ok := strings.Cut(raw, "://"); ok {
			if info, _, ok := strings.Cut(rest, "@"); ok {
				if _, written, ok := strings.Cut(info, ":"); ok && written != "" {
					pairs = append(pairs, ":"+written+"@", ":"+Mask+"@")
				}
			}
		}
		pairs = append(pairs, pw, Mask)
	}
	if len(pairs) == 0 {
		return text
	}
	return strings.NewReplacer(pairs...).Replace(text)
}

// Logger returns l whose lines never show the secrets of the URL raw: the
// message and every attribute pass through In. Give it to whatever logs
// errors that may quote the URL (OPA's downloader and REST client do).
func Logger(l *slog.Logger, raw string) *slog.Logger {
	if URL(raw) == raw {
		return l // nothing to hide
	}
	return slog.New(handler{l.Handler(), raw})
}

type handler struct {
	h   slog.Handler
	raw string
}

func (h handler) Enabled(ctx context.Context, level slog.Level) bool { return h.h.Enabled(ctx, level) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, In(r.Message, h.raw), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return handler{h.h.WithAttrs(h.attrs(attrs)), h.raw}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.h.WithGroup(name), h.raw} }

// attr is a with every string it shows (an error's message, a URL, a
// group's members) passed through In.
func (h handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindGroup:
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(h.attrs(v.Group())...)}
	case slog.KindString, slog.KindAny:
		s := v.String()
		if r := In(s, h.raw); r != s {
			return slog.String(a.Key, r)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// attrs is each of as through attr: a handler's attributes, a group's.
func (h handler) attrs(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = h.attr(a)
	}
	return out
}
