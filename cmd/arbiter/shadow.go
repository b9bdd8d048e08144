package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/shadow"
)

// shadowCommand drives the candidate in shadow of a running server (the
// /v1/shadow routes): load, status, promote, clear.
func shadowCommand() *command {
	c := newCommand("shadow", "Load, judge, promote or clear a candidate in shadow on a running server",
		`Drive the candidate that a running arbiter serve decides beside the live revision, in
shadow: it never answers a caller; its report shows which decisions it would change.`, exitError)
	// Without a known subcommand, the subcommands' flags are not to be
	// parsed: what is missing is the subcommand.
	c.FParseErrWhitelist.UnknownFlags = true
	c.run = func(_ context.Context, _ io.Reader, _, stderr io.Writer) int {
		msg := "want load, status, promote or clear"
		if c.NArg() > 0 {
			if s := c.SuggestionsFor(c.Arg(0)); len(s) > 0 {
				msg = fmt.Sprintf("unknown command %q: did you mean %s?", c.Arg(0), s[0])
			} else {
				msg = fmt.Sprintf("unknown command %q: %s", c.Arg(0), msg)
			}
		}
		return say(stderr, exitError, "arbiter shadow: %s", msg)
	}
	var schemas, tests, revision string
	var force bool
	load := clientCommand("load DIR|BUNDLE", "Put a policy folder or a bundle file in shadow",
		`Put the revision of a policy folder (with the server's schemas and tests unless --schemas,
--tests) or of a bundle file (verified with the server's --bundle-verification-* key) in
shadow. The paths are the server's, made absolute here.`, 1, func(ctx context.Context, cl *client, args []string) int {
			return shadowLoad(ctx, cl, args[0], schemas, tests)
		})
	load.StringVar(&schemas, "schemas", "", "schema folder of a folder candidate (default: the server's)")
	load.StringVar(&tests, "tests", "", "test folder that gates a folder candidate (default: the server's)")
	promote := clientCommand("promote", "Make the candidate live through the promotion gate",
		"Make the candidate in shadow live through the promotion gate (POST /v1/shadow/promote), or\npast it with --force, recorded as forced.", 0,
		func(ctx context.Context, cl *client, _ []string) int { return shadowPromote(ctx, cl, force, revision) })
	promote.BoolVar(&force, "force", false, "even when the promotion gate refuses (recorded as forced)")
	promote.StringVar(&revision, "revision", "", "only if the candidate in shadow is this revision (the one whose report you read)")
	c.subs = []*command{load,
		clientCommand("status", "Show the candidate, the progress toward the gate and the impact report",
			"Print GET /v1/shadow: the candidate, the progress toward the promotion gate (judged 57 of\n100), why it would refuse, the stats and the impact report.", 0, shadowStatus),
		promote,
		clientCommand("clear", "Drop the candidate in shadow", "Drop the candidate in shadow (DELETE /v1/shadow).", 0, shadowClear),
	}
	return c
}

// shadowLoad puts the revision of a policy folder (with the server's
// schemas and tests unless given) or of a bundle file in shadow. The paths
// are the server's: made absolute here, for a server on the same machine.
func shadowLoad(ctx context.Context, cl *client, path, schemas, tests string) int {
	body := map[string]string{}
	for k, v := range map[string]string{"policies": path, "schemas": schemas, "tests": tests} {
		if v == "" {
			continue
		}
		abs, err := filepath.Abs(v)
		if err != nil {
			return cl.fail(err)
		}
		body[k] = abs
	}
	fi, err := os.Stat(body["policies"])
	if err != nil {
		return cl.fail(err)
	}
	if !fi.IsDir() {
		if schemas != "" || tests != "" {
			return cl.fail(errors.New("a bundle carries its schemas and tests: --schemas and --tests are for a folder"))
		}
		body = map[string]string{"bundle": body["policies"]}
	}
	var doc struct {
		Candidate candidateView `json:"candidate"`
	}
	if printed, code := cl.call(ctx, http.MethodPost, "/v1/shadow", body, &doc); printed || code != exitOK {
		return code
	}
	return say(cl.stdout, exitOK, "in shadow: %s from %s", doc.Candidate.Revision, doc.Candidate.Origin)
}

type candidateView struct {
	Revision  string    `json:"policy_revision"`
	Origin    string    `json:"origin"`
	LoadedBy  string    `json:"loaded_by"`
	Decisions []string  `json:"decisions"`
	LoadedAt  time.Time `json:"loaded_at"`
}

func shadowStatus(ctx context.Context, cl *client, _ []string) int {
	stdout := cl.stdout
	var doc struct {
		Candidate  *candidateView `json:"candidate"`
		Live       string         `json:"live_revision"`
		Stats      shadow.Stats   `json:"stats"`
		Promotable bool           `json:"promotable"`
		Refusals   []string       `json:"refusals"`
		Progress   string         `json:"progress"`
		Report     *shadow.Report `json:"report"`
	}
	var all map[string]any
	if printed, code := cl.call(ctx, http.MethodGet, "/v1/shadow", nil, &doc, &all); printed || code != exitOK {
		return code
	}
	if doc.Candidate == nil {
		fmt.Fprintf(stdout, "no candidate in shadow; live %s\n", orNone(doc.Live))
	} else {
		c := doc.Candidate
		fmt.Fprintf(stdout, "candidate  %s from %s (live %s)\n", c.Revision, c.Origin, orNone(doc.Live))
		fmt.Fprintf(stdout, "loaded     by %s at %s; decisions %s\n", orNone(c.LoadedBy), c.LoadedAt.UTC().Format(time.RFC3339Nano), orNone(strings.Join(c.Decisions, ", ")))
		fmt.Fprintf(stdout, "gate       %s", doc.Progress)
		if doc.Promotable {
			fmt.Fprintln(stdout, ": promotable")
		} else {
			fmt.Fprintln(stdout, ": not promotable")
			writeIndented(stdout, doc.Refusals)
		}
		s := doc.Stats
		seconds := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) + "s" }
		fmt.Fprintf(stdout, "stats      %d sampled, %d judged, %d dropped, %d expired, %d abandoned, %d unjudged, %d queued, %d in flight, %d paused\n",
			s.Sampled, s.Judged, s.Dropped, s.Expired, s.Abandoned, s.Unjudged, s.Queued, s.InFlight, s.Paused)
		fmt.Fprintf(stdout, "time       %s evaluating, %s throttled, %s paused\n", seconds(s.EvaluationSeconds), seconds(s.ThrottledSeconds), seconds(s.PausedSeconds))
	}
	writeOthers(stdout, all, doc)
	if doc.Report != nil {
		doc.Report.WriteText(stdout)
	}
	return exitOK
}

func shadowPromote(ctx context.Context, cl *client, force bool, revision string) int {
	stdout := cl.stdout
	var doc struct {
		Promotion shadow.Promotion `json:"promotion"`
	}
	var all map[string]any
	if printed, code := cl.call(ctx, http.MethodPost, "/v1/shadow/promote", map[string]any{"force": force, "revision": revision}, &doc, &all); printed || code != exitOK {
		return code
	}
	p := doc.Promotion
	fmt.Fprintf(stdout, "%s %s by %s at %s, replacing %s (from %s)\n", promoted(p.Forced), p.Revision, orNone(p.By), p.At.UTC().Format(time.RFC3339Nano), orNone(p.From), orNone(p.Origin))
	writeIndented(stdout, p.Refusals)
	p.Report.WriteText(stdout)
	// The gate and its evidence, leaf by leaf, as the answer has them.
	pm, _ := all["promotion"].(map[string]any)
	writeOthers(stdout, all, doc)
	writeLeaves(stdout, "promotion", map[string]any{"gate": pm["gate"], "evidence": pm["evidence"]})
	return exitOK
}

func shadowClear(ctx context.Context, cl *client, _ []string) int {
	stdout := cl.stdout
	var doc struct {
		Cleared *candidateView `json:"cleared"`
	}
	if printed, code := cl.call(ctx, http.MethodDelete, "/v1/shadow", nil, &doc); printed || code != exitOK {
		return code
	}
	if doc.Cleared == nil {
		return say(stdout, exitOK, "no candidate was in shadow")
	}
	return say(stdout, exitOK, "cleared %s", doc.Cleared.Revision)
}
