package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A serve process owns its decision log file and its state folder: two
// processes appending to one log interleave and rotate it under each
// other, and two saving into one folder replace each other's last good
// copy. Each takes an exclusive flock on a hidden file beside what it owns,
// and holds it until it exits; the kernel releases it however the process
// ends (kill -9 too), so a stale lock never blocks a restart.

// acquireLock takes the lock at path for what flag configures (shown as
// "--flag VALUE"), or says in one sentence why it cannot: another process
// holds it (with its pid, as it wrote it), or the file cannot be opened.
// The lock is the file it returns: its flock lives as long as the file is
// open.
func acquireLock(path, flag, value string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("%s %s: cannot create the folder of its lock file %s: %w", flag, value, path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("%s %s: cannot open its lock file %s: %w", flag, value, path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s %s is in use by %s (lock file %s): give each server its own %s", flag, value, holder, path, flag)
		}
		return nil, fmt.Errorf("%s %s: cannot lock %s: %w", flag, value, path, err)
	}
	// The holder's pid, for the message of the next one that tries; the
	// lock, not this content, is what excludes.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockOwned takes the locks of the decision log file (unless it is stdout
// or off) and of the state folder (unless off, or unused: the revisions
// come from a bundle).
func (c *Config) lockOwned() ([]*os.File, error) {
	var held []*os.File
	if c.DecisionLog != "" && c.DecisionLog != "-" {
		// A dot file beside the log, which `arbiter replay --log DIR` skips
		// as it skips every dot file.
		lock := filepath.Join(filepath.Dir(c.DecisionLog), "."+filepath.Base(c.DecisionLog)+".lock")
		l, err := acquireLock(lock, "--decision-log", c.DecisionLog)
		if err != nil {
			return nil, err
		}
		held = append(held, l)
	}
	if c.StateDir != "" && c.BundleURL == "" {
		// A dot file inside the folder, beside the saved revisions.
		l, err := acquireLock(filepath.Join(c.StateDir, ".arbiter.lock"), "--state-dir", c.StateDir)
		if err != nil {
			for _, h := range held {
				_ = h.Close()
			}
			return nil, err
		}
		held = append(held, l)
	}
	return held, nil
}
