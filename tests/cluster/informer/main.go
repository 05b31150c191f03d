// Command informer is a client-go informer for the tests: it syncs a shared informer on
// namespaces, configmaps or nodes the way a current controller does (WatchListClient on, so the
// initial list is a streaming list that ends with the k8s.io/initial-events-end bookmark, over
// gzip as every Go client asks for it), then waits for one object to be added, or for an
// object to carry a label (--wait-for-label: kubelet's node informer is one node by
// --field-selector, and lives through an outage of the hub's cloud).
//
// Its stdout is for a test to read, one line each:
//
//	WATCHLIST true|false   whether the reflector streams its initial list
//	SYNCED <n>             the informer has synced, with n objects in its store
//	EVENT ADDED <name>     the object named by --wait-for was added
//	EVENT LABELED <name>   an object was added or updated with the --wait-for-label key
//
// and with --report-watch also:
//
//	BOOKMARK               a JSON BOOKMARK event arrived on a watch, as read off the wire
//	                       (the end of a streaming list is one too)
//	WATCH-ERROR <text>     the reflector's watch (or list) failed: it lists or watches again
//	                       (without the flag, client-go logs it on stderr)
//
// On a timeout it prints the reason on stderr and exits 1 (2 for bad flags). client-go's own
// log (the reflector's errors) goes to stderr too.
//
// Built by `make cluster-bins` (tests/cluster/build.py) from the pinned modules.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	clientfeatures "k8s.io/client-go/features"
)

type options struct {
	kubeconfig string
	server     string
	token      string
	insecure   bool
	resource   string
	namespace  string
	fields     string
	waitFor    string
	waitLabel  string
	report     bool
	timeout    time.Duration
}

// out writes the lines a test reads, whole, from any goroutine.
type out struct{ mu sync.Mutex }

func (o *out) line(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Printf(format+"\n", args...)
}

var bookmark = []byte(`"type":"BOOKMARK"`)

// bookmarks reports every JSON BOOKMARK event of a watch's body as it is read.
type bookmarks struct {
	body io.ReadCloser
	tail []byte
	say  *out
}

func (b *bookmarks) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 {
		seen := append(b.tail, p[:n]...)
		b.say.count(bytes.Count(seen, bookmark))
		keep := len(bookmark) - 1
		if len(seen) < keep {
			keep = len(seen)
		}
		// The tail cannot hold a whole match: each one is counted once.
		b.tail = append([]byte(nil), seen[len(seen)-keep:]...)
	}
	return n, err
}

func (b *bookmarks) Close() error { return b.body.Close() }

func (o *out) count(n int) {
	for i := 0; i < n; i++ {
		o.line("BOOKMARK")
	}
}

type watching struct {
	next http.RoundTripper
	say  *out
}

func (w watching) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(r)
	if err == nil && r.URL.Query().Get("watch") == "true" {
		resp.Body = &bookmarks{body: resp.Body, say: w.say}
	}
	return resp, err
}

func parse() (options, error) {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig to connect with (else --server)")
	flag.StringVar(&o.server, "server", "", "apiserver URL, when there is no --kubeconfig")
	flag.StringVar(&o.token, "token", "", "bearer token for --server")
	flag.BoolVar(&o.insecure, "insecure", false, "do not verify --server's certificate")
	flag.StringVar(&o.resource, "resource", "namespaces", "namespaces, configmaps or nodes")
	flag.StringVar(&o.namespace, "namespace", "", "the namespace of configmaps (all if empty)")
	flag.StringVar(&o.fields, "field-selector", "", "list and watch only these (metadata.name=n1)")
	flag.StringVar(&o.waitFor, "wait-for", "", "after syncing, wait until this object is added")
	flag.StringVar(&o.waitLabel, "wait-for-label", "",
		"after syncing, wait until an object is added or updated with this label key")
	flag.BoolVar(&o.report, "report-watch", false,
		"print a line for each BOOKMARK event and each watch error")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "for syncing, and then for --wait-for")
	flag.Parse()
	if (o.kubeconfig == "") == (o.server == "") {
		return o, fmt.Errorf("give one of --kubeconfig and --server")
	}
	if o.resource != "namespaces" && o.resource != "configmaps" && o.resource != "nodes" {
		return o, fmt.Errorf("--resource %q: not namespaces, configmaps or nodes", o.resource)
	}
	if o.waitFor != "" && o.waitLabel != "" {
		return o, fmt.Errorf("give at most one of --wait-for and --wait-for-label")
	}
	return o, nil
}

func config(o options) (*rest.Config, error) {
	if o.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	}
	return &rest.Config{
		Host:            o.server,
		BearerToken:     o.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: o.insecure},
	}, nil
}

func run(o options) error {
	cfg, err := config(o)
	if err != nil {
		return err
	}
	say := &out{}
	if o.report {
		cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { return watching{next, say} })
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(
		client, 0, informers.WithNamespace(o.namespace),
		informers.WithTweakListOptions(func(l *metav1.ListOptions) { l.FieldSelector = o.fields }))
	var informer cache.SharedIndexInformer
	switch o.resource {
	case "namespaces":
		informer = factory.Core().V1().Namespaces().Informer()
	case "nodes":
		informer = factory.Core().V1().Nodes().Informer()
	default:
		informer = factory.Core().V1().ConfigMaps().Informer()
	}
	if o.report {
		err = informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			say.line("WATCH-ERROR %s", strings.ReplaceAll(err.Error(), "\n", " "))
		})
		if err != nil {
			return err
		}
	}
	added := make(chan string, 64)
	labeled := make(chan string, 64)
	seen := func(obj any) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		if _, has := m.GetLabels()[o.waitLabel]; o.waitLabel != "" && has {
			select {
			case labeled <- m.GetName():
			default:
			}
		}
	}
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m, ok := obj.(metav1.Object); ok && m.GetName() == o.waitFor {
				select {
				case added <- m.GetName():
				default:
				}
			}
			seen(obj)
		},
		UpdateFunc: func(_, obj any) { seen(obj) },
	})
	if err != nil {
		return err
	}
	say.line("WATCHLIST %t", clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient))

	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	defer func() {
		cancel() // Shutdown waits for the informers, which stop on this
		factory.Shutdown()
	}()

	syncCtx, syncCancel := context.WithTimeout(ctx, o.timeout)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		return fmt.Errorf("the %s informer did not sync in %s", o.resource, o.timeout)
	}
	say.line("SYNCED %d", len(informer.GetStore().ListKeys()))
	switch {
	case o.waitFor != "":
		select {
		case name := <-added:
			say.line("EVENT ADDED %s", name)
			return nil
		case <-time.After(o.timeout):
			return fmt.Errorf("%s %q was not added in %s", o.resource, o.waitFor, o.timeout)
		}
	case o.waitLabel != "":
		select {
		case name := <-labeled:
			say.line("EVENT LABELED %s", name)
			return nil
		case <-time.After(o.timeout):
			return fmt.Errorf("no %s labeled %q in %s", o.resource, o.waitLabel, o.timeout)
		}
	}
	return nil
}

func main() {
	// Explicit, whatever the default of the pinned client-go: the informer must stream its
	// initial list. Read by the reflector when the informer is made, so set before that.
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "true"); err != nil {
		fmt.Fprintln(os.Stderr, "informer:", err)
		os.Exit(1)
	}
	o, err := parse()
	if err != nil {
		fmt.Fprintln(os.Stderr, "informer:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "informer:", err)
		os.Exit(1)
	}
}
