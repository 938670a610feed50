package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ReadObjects decodes every YAML or JSON document in the named files (a
// directory means its *.yaml, *.yml and *.json files, sorted, but for a
// kustomization.yaml: kustomize's list of the others, not an object).
func ReadObjects(paths ...string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		var inDir []string
		for _, e := range entries {
			if e.Name() == "kustomization.yaml" {
				continue
			}
			switch filepath.Ext(e.Name()) {
			case ".yaml", ".yml", ".json":
				inDir = append(inDir, filepath.Join(p, e.Name()))
			}
		}
		sort.Strings(inDir)
		files = append(files, inDir...)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("decoding %s: %w", f, err)
			}
			if len(m) == 0 {
				continue // an empty document between "---" lines
			}
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs, nil
}

// InstallCRDs creates the CustomResourceDefinitions in paths (files or
// directories) and waits until each is established and its resource
// answers a list, so the test can use it at once.
func (e *Env) InstallCRDs(t testing.TB, paths ...string) {
	t.Helper()
	if err := e.CreateCRDs(paths...); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
}

// CreateCRDs is InstallCRDs outside a test.
func (e *Env) CreateCRDs(paths ...string) error {
	objs, err := ReadObjects(paths...)
	if err != nil {
		return fmt.Errorf("reading CRDs: %w", err)
	}
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			return fmt.Errorf("given a %s %q, want only CustomResourceDefinitions", o.GetKind(), o.GetName())
		}
		if _, err := dyn.Resource(crdGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating CRD %s: %w", o.GetName(), err)
		}
	}
	for _, o := range objs {
		if err := waitCRD(ctx, dyn, o); err != nil {
			return fmt.Errorf("CRD %s: %w", o.GetName(), err)
		}
	}
	return nil
}

func waitCRD(ctx context.Context, dyn dynamic.Interface, o *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
	var served string
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if s, _ := vm["served"].(bool); s {
			served, _ = vm["name"].(string)
			break
		}
	}
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(crdGVR).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			switch {
			case cm["type"] == "Established" && cm["status"] == "True":
				established = true
			case cm["type"] == "NamesAccepted" && cm["status"] == "False":
				return false, fmt.Errorf("names not accepted: %v", cm["message"])
			}
		}
		if !established {
			last = errors.New("not established yet")
			return false, nil
		}
		if served == "" {
			return true, nil
		}
		// Established can precede the handler serving the resource.
		_, err = dyn.Resource(schema.GroupVersionResource{Group: group, Version: served, Resource: plural}).
			List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil && (apierrors.IsNotFound(err) || strings.Contains(err.Error(), "could not find")) {
			last = err
			return false, nil
		}
		return err == nil, err
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}
