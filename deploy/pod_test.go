package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// imageUser is the user of the Dockerfile's final stage (its last USER).
func imageUser(t *testing.T) string {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	user := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
		case strings.EqualFold(fields[0], "FROM"):
			user = "" // a new stage starts as its base's user
		case strings.EqualFold(fields[0], "USER") && len(fields) > 1:
			user = fields[1]
		}
	}
	return user
}

// deploymentPod is the pod spec of kubernetes.yaml's Deployment, as maps.
func deploymentPod(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if o["kind"] == "Deployment" {
			spec, _ := o["spec"].(map[string]any)
			tmpl, _ := spec["template"].(map[string]any)
			pod, _ := tmpl["spec"].(map[string]any)
			return pod
		}
	}
	t.Fatal("no Deployment in kubernetes.yaml")
	return nil
}

// obj is v's member key as an object (nil when v or it is none).
func obj(v any, key string) map[string]any {
	m, _ := v.(map[string]any)
	o, _ := m[key].(map[string]any)
	return o
}

// TestPodStartsUnderTheKubeletAndRestricted checks the rendered pod against
// the rules the kubelet applies before it starts a container and against
// the restricted Pod Security Standard. The image's user was the name
// "nonroot", which the kubelet refuses under runAsNonRoot ("image has
// non-numeric user (nonroot), cannot verify user is non-root").
func TestPodStartsUnderTheKubeletAndRestricted(t *testing.T) {
	pod := deploymentPod(t)
	user, _, _ := strings.Cut(imageUser(t), ":")
	if _, err := strconv.Atoi(user); err != nil {
		t.Errorf("the image's USER %q is not numeric: the kubelet cannot verify it is not root", user)
	}
	psc := obj(pod, "securityContext")
	for _, key := range []string{"hostNetwork", "hostPID", "hostIPC"} {
		if pod[key] == true {
			t.Errorf("restricted: %s", key)
		}
	}
	containers, _ := pod["containers"].([]any)
	if len(containers) == 0 {
		t.Fatal("no containers")
	}
	for _, c := range containers {
		csc := obj(c, "securityContext")
		setting := func(key string) any { // the container's, else the pod's
			if v, ok := csc[key]; ok {
				return v
			}
			return psc[key]
		}
		if setting("runAsNonRoot") != true {
			t.Error("restricted: runAsNonRoot is not true")
		}
		uid := user
		if v, ok := setting("runAsUser").(int); ok {
			uid = strconv.Itoa(v)
		}
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("the kubelet refuses the container: runAsNonRoot with user %q", uid)
		}
		if csc["allowPrivilegeEscalation"] != false {
			t.Error("restricted: allowPrivilegeEscalation is not false")
		}
		if csc["privileged"] == true {
			t.Error("restricted: privileged")
		}
		caps := obj(csc, "capabilities")
		drop, _ := caps["drop"].([]any)
		if !slices.Contains(drop, any("ALL")) {
			t.Error("restricted: capabilities.drop lacks ALL")
		}
		if add, _ := caps["add"].([]any); len(add) > 0 && !(len(add) == 1 && add[0] == "NET_BIND_SERVICE") {
			t.Errorf("restricted: capabilities.add %v", add)
		}
		seccomp, _ := setting("seccompProfile").(map[string]any)
		if typ := seccomp["type"]; typ != "RuntimeDefault" && typ != "Localhost" {
			t.Errorf("restricted: seccompProfile.type %v", typ)
		}
	}
	volumes, _ := pod["volumes"].([]any)
	allowed := []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
	for _, v := range volumes {
		for key := range v.(map[string]any) {
			if key != "name" && !slices.Contains(allowed, key) {
				t.Errorf("restricted: volume type %s", key)
			}
		}
	}
}

// TestBuildContextLeavesOutLogsAndBinaries: the image's build context
// (the repository root, as deploy/Dockerfile is built) carries no decision
// logs, binaries or history.
func TestBuildContextLeavesOutLogsAndBinaries(t *testing.T) {
	raw, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatalf("no .dockerignore: the build context carries var/, bin/ and .git: %v", err)
	}
	ignored := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			ignored[strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/")] = true
		}
	}
	for _, want := range []string{".git", "var", "bin"} {
		if !ignored[want] {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}
