package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/logship"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/shadow"
)

// How the memory a replica may use is shared, when its limit is known
// (the container's cgroup, --memory-limit or GOMEMLIMIT):
const (
	// cgroupShare of the container's limit becomes the Go memory limit;
	// the rest is for what the Go runtime does not count (stacks of
	// threads, the binary, the page cache of the log file).
	cgroupShare = 0.9
	// Admission gets half the Go limit: an eighth for the body bytes in
	// flight, three eighths for their decoded JSON values, each costing
	// about bytesPerValue (server/admission.go).
	admissionBytesShare  = 1.0 / 8
	admissionValuesShare = 3.0 / 8
	bytesPerValue        = 190
	// The queues of background work (the decision log's, shadow's and,
	// when there are, the upload's and the decision store's) share an
	// eighth, each in proportion to its default.
	queueShare = 1.0 / 8
)

// cgroupRootEnv points the cgroup reading at a folder holding memory.max
// (cgroup v2) or memory.limit_in_bytes (v1), instead of the process's own
// cgroup: for tests, which cannot change the cgroup they run in.
const cgroupRootEnv = "ARBITER_CGROUP_ROOT"

// memoryPlan is the Go memory limit and the byte budgets that fit inside
// it, each with where it came from: /v1/status's memory member.
type memoryPlan struct {
	LimitBytes int64 `json:"limit_bytes"` // 0: no limit
	// Source is GOMEMLIMIT (the environment), flag (--memory-limit or
	// ARBITER_MEMORY_LIMIT), cgroup (cgroupShare of the container's
	// limit) or default.
	Source       string `json:"source"`
	CgroupBytes  int64  `json:"cgroup_limit_bytes,omitempty"`
	CgroupReason string `json:"cgroup,omitempty"` // why no cgroup limit was used, when none was
	// Budgets by flag name: each is the flag's value (source flag), a
	// share of the limit (memory-limit), or the default, which fits.
	Budgets map[string]budgetValue `json:"budgets"`
}

type budgetValue struct {
	Value  int64  `json:"value"`
	Source string `json:"source"`
}

// planMemory sets the Go memory limit and fits the byte budgets of c that
// were not set explicitly inside it. set names the flags given (on the
// command line or in the environment); cgroup reads the container's limit.
func planMemory(c *serveConfig, set map[string]bool, cgroup memlimit.Provider) *memoryPlan {
	p := &memoryPlan{Budgets: map[string]budgetValue{}}
	cg, err := cgroup()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit) || err == nil && cg > math.MaxInt64:
		p.CgroupReason = "no limit"
	case err != nil:
		p.CgroupReason = err.Error()
	default:
		p.CgroupBytes = int64(cg)
	}
	switch {
	case os.Getenv("GOMEMLIMIT") != "":
		p.LimitBytes, p.Source = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
		if p.LimitBytes == math.MaxInt64 {
			p.LimitBytes = 0
		}
	case set["memory-limit"]:
		p.LimitBytes, p.Source = int64(c.memoryLimit), "flag"
	case p.CgroupBytes > 0:
		p.LimitBytes, p.Source = int64(float64(p.CgroupBytes)*cgroupShare), "cgroup"
	default:
		p.LimitBytes, p.Source = int64(c.memoryLimit), "default"
	}
	if p.Source != "GOMEMLIMIT" && p.LimitBytes > 0 {
		debug.SetMemoryLimit(p.LimitBytes)
	}

	// The defaults are sized for the default limit (TestOverloadAcceptance
	// measures a flood under it); a limit that was found or given scales
	// them down to fit.
	scale := p.LimitBytes > 0 && p.Source != "default"
	l := float64(p.LimitBytes)
	queues := float64(decisionlog.DefaultQueueBytes + shadow.DefaultQueueBytes)
	if c.LogService != "" {
		queues += logship.DefaultQueueBytes
	}
	if c.StoreURL != "" { // the decision store's queue shares the eighth only when there is one
		queues += decisionstore.DefaultQueueBytes
	}
	type budget struct {
		flag   string
		v      *int64
		def    int64
		fitted float64
	}
	budgets := []budget{
		{"max-inflight-bytes", &c.API.MaxInflightBytes, server.DefaultMaxInflightBytes, l * admissionBytesShare},
		{"max-inflight-values", &c.API.MaxInflightValues, server.DefaultMaxInflightValues, l * admissionValuesShare / bytesPerValue},
		{"decision-log-queue-bytes", &c.Records.QueueBytes, decisionlog.DefaultQueueBytes, l * queueShare * decisionlog.DefaultQueueBytes / queues},
		{"shadow-queue-bytes", &c.Sampling.QueueBytes, shadow.DefaultQueueBytes, l * queueShare * shadow.DefaultQueueBytes / queues},
	}
	if c.LogService != "" {
		budgets = append(budgets, budget{"decision-log-upload-queue-bytes", &c.UploadQueueBytes, logship.DefaultQueueBytes, l * queueShare * logship.DefaultQueueBytes / queues})
	}
	if c.StoreURL != "" {
		budgets = append(budgets, budget{"decision-store-queue-bytes", &c.StoreQueueBytes, decisionstore.DefaultQueueBytes, l * queueShare * decisionstore.DefaultQueueBytes / queues})
	}
	for _, b := range budgets {
		switch {
		case set[b.flag]:
			p.Budgets[b.flag] = budgetValue{*b.v, "flag"}
		case scale && b.fitted < float64(b.def):
			*b.v = max(int64(b.fitted), 1)
			p.Budgets[b.flag] = budgetValue{*b.v, "memory-limit"}
		default:
			p.Budgets[b.flag] = budgetValue{*b.v, "default"}
		}
	}
	return p
}

// cgroupProvider is the container's memory limit: automemlimit's reading
// of the process's own cgroup (v2 or v1, wherever it is mounted), or the
// files under $ARBITER_CGROUP_ROOT when that is set.
func cgroupProvider() memlimit.Provider {
	if root := os.Getenv(cgroupRootEnv); root != "" {
		return cgroupFiles(root)
	}
	return memlimit.FromCgroup
}

// cgroupFiles reads the memory limit in a cgroup's folder: memory.max
// (v2: bytes, or "max" for none), else memory.limit_in_bytes (v1: bytes,
// a value near 2^63 for none). Neither file: no cgroup.
func cgroupFiles(dir string) memlimit.Provider {
	return func() (uint64, error) {
		for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			s := strings.TrimSpace(string(b))
			if s == "max" && f == "memory.max" {
				return 0, memlimit.ErrNoLimit
			}
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q is not a number of bytes", f, s)
			}
			if n >= math.MaxInt64/2 { // v1's "unlimited": the largest page count in bytes
				return 0, memlimit.ErrNoLimit
			}
			return n, nil
		}
		return 0, memlimit.ErrNoCgroup
	}
}
