// Command protometa prints, as JSON, what the protobuf descriptors of the Kubernetes API types
// do not say and the hub needs to turn a protobuf object into the JSON the apiserver gives:
// per message (proto full name) and field number, the Go JSON name and whether the Go field is
// a pointer, is tagged omitempty or omitzero, or is inlined; and which messages wrap a Go slice type
// (metav1.Verbs, ExtraValue: `message X { repeated string items = 1; }` on the wire, a bare
// list in JSON). It reads the types by reflection from the pinned k8s.io/api and apimachinery
// (every kind client-go's scheme registers, plus metav1's own), so the answer is the Go code's.
//
// Run by `make proto` (yurthub/kubeproto/generate.py); the output is committed.
package main

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

type field struct {
	JSON      string `json:"json"`
	Pointer   bool   `json:"pointer,omitempty"`
	OmitEmpty bool   `json:"omitempty,omitempty"`
	OmitZero  bool   `json:"omitzero,omitempty"`
	Inline    bool   `json:"inline,omitempty"`
}

type facts struct {
	Kinds    map[string]string   `json:"kinds"`
	Messages map[string]*message `json:"messages"`
}

type message struct {
	Fields     map[string]field `json:"fields,omitempty"`
	SliceItems bool             `json:"slice,omitempty"`
}

var out = map[string]*message{}

func protoName(t reflect.Type) string {
	return strings.ReplaceAll(t.PkgPath(), "/", ".") + "." + t.Name()
}

func walk(t reflect.Type) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
		if t.Kind() == reflect.Map {
			walk(t.Key())
		}
		if t.Name() != "" && t.Kind() == reflect.Slice && strings.HasPrefix(t.PkgPath(), "k8s.io/") && t.Elem().Kind() == reflect.String {
			out[protoName(t)] = &message{SliceItems: true}
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || !strings.HasPrefix(t.PkgPath(), "k8s.io/") {
		return
	}
	name := protoName(t)
	if _, seen := out[name]; seen {
		return
	}
	m := &message{Fields: map[string]field{}}
	out[name] = m
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		walk(f.Type)
		tag := f.Tag.Get("protobuf")
		if tag == "" {
			continue
		}
		parts := strings.Split(tag, ",")
		if len(parts) < 2 {
			continue
		}
		if _, err := strconv.Atoi(parts[1]); err != nil {
			continue
		}
		jsonTag := strings.Split(f.Tag.Get("json"), ",")
		fd := field{JSON: jsonTag[0], Pointer: f.Type.Kind() == reflect.Pointer}
		for _, opt := range jsonTag[1:] {
			switch opt {
			case "omitempty":
				fd.OmitEmpty = true
			case "omitzero":
				fd.OmitZero = true
			case "inline":
				fd.Inline = true
			}
		}
		if f.Anonymous && fd.JSON == "" {
			fd.Inline = true
		}
		m.Fields[parts[1]] = fd
	}
}

func main() {
	kinds := map[string]string{}
	var types []reflect.Type
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		if strings.HasPrefix(t.PkgPath(), "k8s.io/") {
			kinds[gvk.GroupVersion().String()+"/"+gvk.Kind] = protoName(t)
		}
		types = append(types, t)
	}
	for _, v := range []any{
		metav1.WatchEvent{}, metav1.Status{}, metav1.List{}, metav1.Table{},
		metav1.PartialObjectMetadata{}, metav1.PartialObjectMetadataList{},
		metav1.APIResourceList{}, metav1.APIGroupList{}, metav1.APIVersions{}, metav1.DeleteOptions{},
	} {
		t := reflect.TypeOf(v)
		kinds["meta.k8s.io/v1/"+t.Name()] = protoName(t)
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return protoName(types[i]) < protoName(types[j]) })
	for _, t := range types {
		walk(t)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(facts{Kinds: kinds, Messages: out}); err != nil {
		panic(err)
	}
}
