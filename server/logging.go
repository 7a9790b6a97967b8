package server

import (
	"fmt"
	"io"
	"log/slog"
)

// Log keys used across Tenure, so that log lines are greppable and stable
// across releases. Handlers use slog's standard "time", "level" and "msg".
const (
	LogKeyComponent = "component"
	LogKeyMember    = "member"
	LogKeyError     = "err"
)

// ParseLogLevel maps a --log-level value (debug, info, warn, error) to a slog level.
func ParseLogLevel(level string) (slog.Level, error) {
	switch level {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
}

// NewLogger returns a logger writing to w at the given level ("debug",
// "info", "warn", "error"; empty means info) in the given format ("json" or
// "text"; empty means json). Records carry the keys time (RFC 3339 with
// nanoseconds, UTC), level (DEBUG, INFO, WARN, ERROR), msg, then the
// caller's attributes.
func NewLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	lvl, err := ParseLogLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{
		Level: lvl,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
				return slog.String(slog.TimeKey, a.Value.Time().UTC().Format("2006-01-02T15:04:05.000000000Z07:00"))
			}
			return a
		},
	}
	var h slog.Handler
	switch format {
	case "json", "":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format: %q is not one of json, text", format)
	}
	return slog.New(h), nil
}
