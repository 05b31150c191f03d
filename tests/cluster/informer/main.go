// Command informer is a client-go informer for the tests: it syncs a shared informer on
// namespaces or configmaps the way a current controller does (WatchListClient on, so the
// initial list is a streaming list that ends with the k8s.io/initial-events-end bookmark, over
// gzip as every Go client asks for it), then waits for one object to be added.
//
// Its stdout is for a test to read, one line each:
//
//	WATCHLIST true|false   whether the reflector streams its initial list
//	SYNCED <n>             the informer has synced, with n objects in its store
//	EVENT ADDED <name>     the object named by --wait-for was added
//
// On a timeout it prints the reason on stderr and exits 1 (2 for bad flags). client-go's own
// log (the reflector's errors) goes to stderr too.
//
// Built by `make cluster-bins` (tests/cluster/build.py) from the pinned modules.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
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
	waitFor    string
	timeout    time.Duration
}

func parse() (options, error) {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig to connect with (else --server)")
	flag.StringVar(&o.server, "server", "", "apiserver URL, when there is no --kubeconfig")
	flag.StringVar(&o.token, "token", "", "bearer token for --server")
	flag.BoolVar(&o.insecure, "insecure", false, "do not verify --server's certificate")
	flag.StringVar(&o.resource, "resource", "namespaces", "namespaces or configmaps")
	flag.StringVar(&o.namespace, "namespace", "", "the namespace of configmaps (all if empty)")
	flag.StringVar(&o.waitFor, "wait-for", "", "after syncing, wait until this object is added")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "for syncing, and then for --wait-for")
	flag.Parse()
	if (o.kubeconfig == "") == (o.server == "") {
		return o, fmt.Errorf("give one of --kubeconfig and --server")
	}
	if o.resource != "namespaces" && o.resource != "configmaps" {
		return o, fmt.Errorf("--resource %q: not namespaces or configmaps", o.resource)
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
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(
		client, 0, informers.WithNamespace(o.namespace))
	var informer cache.SharedIndexInformer
	if o.resource == "namespaces" {
		informer = factory.Core().V1().Namespaces().Informer()
	} else {
		informer = factory.Core().V1().ConfigMaps().Informer()
	}
	added := make(chan string, 64)
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m, ok := obj.(metav1.Object); ok && m.GetName() == o.waitFor {
				select {
				case added <- m.GetName():
				default:
				}
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Printf("WATCHLIST %t\n", clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient))

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
	fmt.Printf("SYNCED %d\n", len(informer.GetStore().ListKeys()))
	if o.waitFor == "" {
		return nil
	}
	select {
	case name := <-added:
		fmt.Printf("EVENT ADDED %s\n", name)
		return nil
	case <-time.After(o.timeout):
		return fmt.Errorf("%s %q was not added in %s", o.resource, o.waitFor, o.timeout)
	}
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
