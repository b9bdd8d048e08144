package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// whatIfData is the what-if form and, once run, its two evaluations.
type whatIfData struct {
	Action    string
	Decision  string
	Decisions []string // offered when the form is not about one decision
	Input     string
	Paste     string
	PasteAt   string
	Targets   []string // top-level members of the decision's input schema
	schema    any      // the decision's input schema
	Ran       bool
	Problem   string
	Live      *evaluation
	Candidate *evaluation
	// NoCandidate says why there is no candidate column.
	NoCandidate string
	Differ      bool
	// LiveOnly and CandidateOnly are the reasons one answer gives and the
	// other does not.
	LiveOnly, CandidateOnly []string
}

func (h *handler) newWhatIf(decision, inputText string) whatIfData {
	wi := whatIfData{Decision: decision, Input: inputText}
	if snap := h.cfg.Decider.Snapshot(); snap != nil {
		for _, d := range snap.Decisions() {
			wi.Decisions = append(wi.Decisions, d.Name)
			if d.Name == decision {
				wi.Targets = topLevelMembers(d.InputSchema)
				wi.schema = d.InputSchema
			}
		}
	}
	return wi
}

// topLevelMembers lists the properties of an input schema, as JSON
// pointers: where a pasted document can go.
func topLevelMembers(schema any) []string {
	var out []string
	for k := range memberProperties(schema) {
		out = append(out, "/"+jsonptr.Escape(k))
	}
	sort.Strings(out)
	return out
}

// readWhatIf reads the posted form into wi; it answers the request itself
// (and returns false) when the post is refused.
func (h *handler) readWhatIf(w http.ResponseWriter, r *http.Request, wi *whatIfData) bool {
	if !sameOrigin(r) {
		h.render(w, r, http.StatusForbidden, "error", page{Title: "Refused", Message: "A what-if must be posted from these pages."})
		return false
	}
	// Form encoding can triple the size of a JSON text, and there are two.
	if !h.readForm(w, r, 6*h.cfg.MaxBodyBytes+1<<20, "What if") {
		return false
	}
	if d := r.PostForm.Get("decision"); d != "" && wi.Decision == "" {
		*wi = h.newWhatIf(d, "")
	}
	wi.Input = r.PostForm.Get("input")
	wi.Paste = r.PostForm.Get("paste")
	wi.PasteAt = r.PostForm.Get("paste_at")
	return true
}

// runWhatIf evaluates the form's input, with the pasted document put in
// place, against the live revision and the shadow candidate. Nothing is
// logged: the Decider and the Shadow decide without the decision log.
func (h *handler) runWhatIf(ctx context.Context, wi *whatIfData) {
	wi.Ran = true
	body := []byte(wi.Input)
	if int64(len(body)) > h.cfg.MaxBodyBytes {
		wi.Problem = fmt.Sprintf("The input is larger than %d bytes, the limit of a request.", h.cfg.MaxBodyBytes)
		return
	}
	if wi.Paste != "" {
		merged, at, err := paste(body, []byte(wi.Paste), wi.PasteAt, wi.Targets, wi.schema)
		if err != nil {
			wi.Problem = err.Error()
			return
		}
		body = merged
		wi.Input = indent(merged)
		wi.Paste, wi.PasteAt = "", at
	}
	live := h.evaluate(ctx, h.cfg.Decider.Decide, "", wi.Decision, body)
	live.ID, live.Label = "live", "Live revision"
	wi.Live = &live
	switch {
	case h.cfg.Shadow == nil:
		wi.NoCandidate = "This server runs no shadow evaluation."
	default:
		cand := h.cfg.Shadow.Candidate()
		if cand == nil {
			wi.NoCandidate = "No shadow candidate is loaded."
			break
		}
		c := h.evaluate(ctx, cand.Snapshot.Decide, cand.Snapshot.Revision, wi.Decision, body)
		c.ID, c.Label = "candidate", "Shadow candidate"
		wi.Candidate = &c
		wi.Differ = differ(live, c)
		wi.LiveOnly, wi.CandidateOnly = without(live.Reasons, c.Reasons), without(c.Reasons, live.Reasons)
	}
}

// without is the members of a that b lacks, in a's order.
func without(a, b []string) []string {
	return slices.DeleteFunc(slices.Clone(a), func(x string) bool { return slices.Contains(b, x) })
}

// candidate is the revision of the candidate in shadow, when there is one.
func (h *handler) candidate() (string, bool) {
	if c := h.cfg.Shadow.Candidate(); c != nil {
		return c.Snapshot.Revision, true
	}
	return "", false
}

// example is the input a what-if of decision starts from: the input the
// diff of the shadow candidate found for it (refuse_to_allow first), or
// else the first fixture input of the live revision, or else {}.
func (h *handler) example(decision string) string {
	if h.cfg.Diffs != nil && h.cfg.Shadow != nil {
		rev, ok := h.candidate()
		if st, found := h.cfg.Diffs.Shadow(); ok && found && st.New == rev && st.Report != nil && st.Report.Decisions[decision] != nil {
			for _, q := range diff.Questions {
				if a := st.Report.Decisions[decision].Get(q); a.Verdict == diff.Found {
					return indent(a.Example)
				}
			}
		}
	}
	if snap := h.cfg.Decider.Snapshot(); snap != nil {
		for _, fx := range snap.Fixtures() {
			if fx.Decision == decision && fx.Input != nil && fx.WantError == nil {
				return indent(fx.Input)
			}
		}
	}
	return "{}"
}

// differ is the opposite of shadow.SameAnswer for two evaluations: another
// error code, or another result value.
func differ(a, b evaluation) bool {
	if a.Err != nil || b.Err != nil {
		return (a.Err == nil) != (b.Err == nil) || a.Err.Code != b.Err.Code
	}
	return !engine.SameJSON(a.Decision.Result, b.Decision.Result)
}

// paste puts doc into the input document at the top-level member at
// (a JSON pointer from targets), or, when at is empty, at the member whose
// schema properties and current value share the most keys with doc: a
// runner-state.json pasted into an input goes where the input's Runner
// state goes. Both are read strictly, and numbers keep their digits.
func paste(body, doc []byte, at string, targets []string, schema any) ([]byte, string, error) {
	in, err := input.Decode(body)
	if err != nil {
		return nil, "", fmt.Errorf("the input is not valid JSON: %v", err)
	}
	obj, ok := in.(map[string]any)
	if !ok {
		return nil, "", errors.New("the input must be a JSON object to paste a document into it")
	}
	pasted, err := input.Decode(doc)
	if err != nil {
		return nil, "", fmt.Errorf("the pasted document is not valid JSON: %v", err)
	}
	key := ""
	if at != "" {
		if slices.Contains(targets, at) {
			key = jsonptr.Unescape(at[1:])
		}
		if key == "" {
			return nil, "", fmt.Errorf("%q is not a member of this decision's input", at)
		}
	} else {
		key = bestMatch(obj, pasted, schema)
		if key == "" {
			return nil, "", errors.New("no member of the input looks like the pasted document (no keys in common): choose where to put it")
		}
	}
	obj[key] = pasted
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, "", err
	}
	return out, "/" + jsonptr.Escape(key), nil
}

// bestMatch is the top-level member whose schema properties and current
// object value share the most keys with doc (ties: the first in key
// order), or "" when none shares one.
func bestMatch(obj map[string]any, doc any, schema any) string {
	d, ok := doc.(map[string]any)
	if !ok {
		return ""
	}
	known, members := map[[2]string]bool{}, map[string]bool{} // (member, key); members
	add := func(member, key string) { known[[2]string{member, key}], members[member] = true, true }
	for member, props := range memberProperties(schema) {
		for _, p := range props {
			add(member, p)
		}
	}
	for member, v := range obj {
		if m, ok := v.(map[string]any); ok {
			for k := range m {
				add(member, k)
			}
		}
	}
	best, bestN := "", 0
	for _, m := range slices.Sorted(maps.Keys(members)) {
		n := 0
		for k := range d {
			if known[[2]string{m, k}] {
				n++
			}
		}
		if n > bestN {
			best, bestN = m, n
		}
	}
	return best
}

// memberProperties lists each top-level property of an input schema, with
// the properties its own schema declares (following local $refs).
func memberProperties(schema any) map[string][]string {
	root, _ := schema.(map[string]any)
	props, _ := root["properties"].(map[string]any)
	out := map[string][]string{}
	for member, s := range props {
		sub, _ := s.(map[string]any)
		for i := 0; i < 8 && sub != nil; i++ { // a chain of $refs, bounded
			ref, ok := sub["$ref"].(string)
			if !ok || !strings.HasPrefix(ref, "#/") {
				break
			}
			sub = resolveLocal(root, ref[2:])
		}
		p, _ := sub["properties"].(map[string]any)
		out[member] = slices.Collect(maps.Keys(p))
	}
	return out
}

func resolveLocal(root map[string]any, ptr string) map[string]any {
	var cur any = root
	for _, tok := range strings.Split(ptr, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[jsonptr.Unescape(tok)]
	}
	m, _ := cur.(map[string]any)
	return m
}

// whatif serves the what-if form on its own, for an input that no logged
// decision had.
func (h *handler) whatif(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("decision")
	wi := h.newWhatIf(name, h.example(name))
	if name == "" && len(wi.Decisions) > 0 {
		wi = h.newWhatIf(wi.Decisions[0], h.example(wi.Decisions[0]))
	}
	if r.Method == http.MethodPost {
		wi.Decision = ""
		if !h.readWhatIf(w, r, &wi) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.EvalTimeout)
		defer cancel()
		h.runWhatIf(ctx, &wi)
	}
	wi.Action = h.cfg.Prefix + "/whatif#whatif-result"
	h.render(w, r, http.StatusOK, "whatif", page{Title: "What if", Nav: "whatif", Data: wi})
}
