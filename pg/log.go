package pg

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// Level is a GOTREE_DEBUG level, as NCCL_DEBUG.
type Level int

const (
	LevelNone Level = iota
	LevelVersion
	LevelWarn
	LevelInfo
	LevelTrace
)

// ParseLevel parses GOTREE_DEBUG ("", VERSION, WARN, INFO, TRACE).
func ParseLevel(s string) (Level, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "NONE":
		return LevelNone, nil
	case "VERSION":
		return LevelVersion, nil
	case "WARN":
		return LevelWarn, nil
	case "INFO":
		return LevelInfo, nil
	case "TRACE":
		return LevelTrace, nil
	}
	return LevelNone, fmt.Errorf("gotree: GOTREE_DEBUG=%q: want VERSION, WARN, INFO or TRACE", s)
}

// Logger writes NCCL-style lines: "host:pid:tid [rank] GOTREE INFO text".
// Subsystems (INIT, GRAPH, NET, COLL, TUNING) filter INFO lines as
// NCCL_DEBUG_SUBSYS does; "^X" excludes.
type Logger struct {
	level  Level
	subsys map[string]bool
	invert bool
	prefix string
	mu     sync.Mutex
	w      io.Writer
}

// NewLogger makes a logger for one rank.
func NewLogger(cfg Config, rank int) *Logger {
	l := &Logger{level: cfg.Debug, w: os.Stderr}
	if cfg.DebugFile != "" {
		name := strings.NewReplacer("%h", hostname(), "%p", fmt.Sprint(os.Getpid())).Replace(cfg.DebugFile)
		if f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			l.w = f
		}
	}
	s := strings.ToUpper(strings.TrimSpace(cfg.DebugSubsys))
	if strings.HasPrefix(s, "^") {
		l.invert, s = true, s[1:]
	}
	if s != "" {
		l.subsys = map[string]bool{}
		for _, x := range strings.Split(s, ",") {
			l.subsys[strings.TrimSpace(x)] = true
		}
	}
	l.prefix = fmt.Sprintf("%s:%d:%d [%d] GOTREE ", hostname(), os.Getpid(), os.Getpid(), rank)
	return l
}

// Enabled reports whether INFO lines of subsys would print.
func (l *Logger) Enabled(lv Level, subsys string) bool {
	if l == nil || l.level < lv {
		return false
	}
	if lv <= LevelWarn || l.subsys == nil || l.subsys["ALL"] {
		return true
	}
	return l.subsys[subsys] != l.invert
}

func (l *Logger) logf(lv Level, subsys, tag, format string, args ...any) {
	if !l.Enabled(lv, subsys) {
		return
	}
	line := l.prefix + tag + " " + fmt.Sprintf(format, args...)
	l.mu.Lock()
	fmt.Fprintln(l.w, line)
	l.mu.Unlock()
}

// Infof logs at INFO for a subsystem.
func (l *Logger) Infof(subsys, format string, args ...any) {
	l.logf(LevelInfo, subsys, "INFO", format, args...)
}

// Versionf logs at GOTREE_DEBUG=VERSION and above (NCCL_DEBUG=VERSION
// prints NCCL's version and nothing else).
func (l *Logger) Versionf(format string, args ...any) {
	l.logf(LevelVersion, "", "INFO", format, args...)
}

// Warnf logs a warning.
func (l *Logger) Warnf(format string, args ...any) { l.logf(LevelWarn, "", "WARN", format, args...) }

// Tracef logs at TRACE.
func (l *Logger) Tracef(subsys, format string, args ...any) {
	l.logf(LevelTrace, subsys, "TRACE", format, args...)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// refusalLog rate-limits warnings about refused connections: a flood of
// strangers must not flood the log. It logs the first 5, then every 100th
// with the running count.
type refusalLog struct {
	mu sync.Mutex
	n  int
}

func (r *refusalLog) warn(l *Logger, format string, args ...any) {
	r.mu.Lock()
	r.n++
	n := r.n
	r.mu.Unlock()
	if n <= 5 || n%100 == 0 {
		l.Warnf("%s (%d refused so far)", fmt.Sprintf(format, args...), n)
	}
}
