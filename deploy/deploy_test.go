// Package deploy holds the deployment files; its test checks the
// Kubernetes manifest, which no container engine here can exercise.
package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas *int             `yaml:"replicas"`
		Selector map[string]any   `yaml:"selector"`
		Ports    []map[string]any `yaml:"ports"`
		Template *podTemplate     `yaml:"template"`
	} `yaml:"spec"`
}

type podTemplate struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Containers []struct {
			Name    string           `yaml:"name"`
			Args    []string         `yaml:"args"`
			Ports   []map[string]any `yaml:"ports"`
			EnvFrom []struct {
				ConfigMapRef struct {
					Name string `yaml:"name"`
				} `yaml:"configMapRef"`
			} `yaml:"envFrom"`
			Env []struct {
				Name string `yaml:"name"`
			} `yaml:"env"`
			ReadinessProbe struct {
				HTTPGet struct {
					Path string `yaml:"path"`
					Port string `yaml:"port"`
				} `yaml:"httpGet"`
			} `yaml:"readinessProbe"`
			VolumeMounts []struct {
				Name      string `yaml:"name"`
				MountPath string `yaml:"mountPath"`
			} `yaml:"volumeMounts"`
		} `yaml:"containers"`
		Volumes []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

// The manifest parses, holds a ConfigMap, a Deployment and a Service that
// refer to each other by the right names, is ready only on a loaded
// revision, and sets only environment variables that `arbiter serve` reads.
func TestKubernetesManifest(t *testing.T) {
	raw, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	byKind := map[string]object{}
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("kubernetes.yaml does not parse: %v", err)
		}
		if _, dup := byKind[o.Kind]; dup {
			t.Fatalf("two %s objects", o.Kind)
		}
		byKind[o.Kind] = o
	}
	cm, dep, svc := byKind["ConfigMap"], byKind["Deployment"], byKind["Service"]
	if cm.Kind == "" || dep.Kind == "" || svc.Kind == "" {
		t.Fatalf("want a ConfigMap, a Deployment and a Service, got %v", len(byKind))
	}
	if dep.Spec.Template == nil || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("the Deployment has no single container")
	}
	pod := dep.Spec.Template
	c := pod.Spec.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/health/ready" {
		t.Errorf("readiness probe %q: want /health/ready (ready only on a loaded revision)", c.ReadinessProbe.HTTPGet.Path)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef.Name != cm.Metadata.Name {
		t.Errorf("the container does not take its environment from ConfigMap %s", cm.Metadata.Name)
	}
	if cm.Data["ARBITER_BUNDLE_URL"] == "" || cm.Data["ARBITER_BUNDLE_VERIFICATION_KEY_FILE"] == "" {
		t.Error("the ConfigMap names no bundle URL or verification key")
	}
	keyMounted := false
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name && strings.HasPrefix(cm.Data["ARBITER_BUNDLE_VERIFICATION_KEY_FILE"], m.MountPath+"/") {
					keyMounted = true
				}
			}
		}
	}
	if !keyMounted {
		t.Error("the verification key file is not mounted from the ConfigMap")
	}
	for k, v := range pod.Metadata.Labels {
		if svcSel := svc.Spec.Selector[k]; svcSel != v {
			t.Errorf("the Service does not select the pods' label %s=%s", k, v)
		}
	}

	// Every ARBITER_ variable set must be one `arbiter serve` reads, as its
	// usage names them ([$ARBITER_ADDR]).
	reads := map[string]bool{}
	for _, m := range regexp.MustCompile(`\[\$(ARBITER_[A-Z0-9_]+)\]`).FindAllStringSubmatch(serveHelp(t), -1) {
		reads[m[1]] = true
	}
	var names []string
	for k := range cm.Data {
		names = append(names, k)
	}
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	envName := regexp.MustCompile(`^ARBITER_[A-Z0-9_]+$`)
	for _, n := range names {
		if envName.MatchString(n) && !reads[n] {
			t.Errorf("%s is set but arbiter serve reads no such variable", n)
		}
	}
}
