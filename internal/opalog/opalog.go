// Package opalog adapts log/slog to the logging.Logger that OPA's plugins
// (the bundle downloader, the REST client) log through.
package opalog

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	"github.com/open-policy-agent/opa/v1/logging"
)

// Logger is an OPA logging.Logger writing to a slog.Logger.
type Logger struct {
	l *slog.Logger
}

// New returns an OPA logger over l (nil discards).
func New(l *slog.Logger) logging.Logger {
	return &Logger{l: cmp.Or(l, slog.New(slog.DiscardHandler))}
}

func (o *Logger) log(level slog.Level, format string, a ...any) {
	if o.l.Enabled(context.Background(), level) {
		o.l.Log(context.Background(), level, fmt.Sprintf(format, a...))
	}
}

// Debug, Info, Warn and Error log at their level.
func (o *Logger) Debug(format string, a ...any) { o.log(slog.LevelDebug, format, a...) }
func (o *Logger) Info(format string, a ...any)  { o.log(slog.LevelInfo, format, a...) }
func (o *Logger) Warn(format string, a ...any)  { o.log(slog.LevelWarn, format, a...) }
func (o *Logger) Error(format string, a ...any) { o.log(slog.LevelError, format, a...) }

// WithFields returns a logger adding fields to every line.
func (o *Logger) WithFields(f map[string]any) logging.Logger {
	attrs := make([]any, 0, 2*len(f))
	for k, v := range f {
		attrs = append(attrs, k, v)
	}
	return &Logger{l: o.l.With(attrs...)}
}

// GetLevel reports the most verbose level slog lets through.
func (o *Logger) GetLevel() logging.Level {
	ctx := context.Background()
	switch {
	case o.l.Enabled(ctx, slog.LevelDebug):
		return logging.Debug
	case o.l.Enabled(ctx, slog.LevelInfo):
		return logging.Info
	case o.l.Enabled(ctx, slog.LevelWarn):
		return logging.Warn
	default:
		return logging.Error
	}
}

// SetLevel is a no-op: the level belongs to the slog handler.
func (o *Logger) SetLevel(logging.Level) {}
