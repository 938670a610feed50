package v1

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Scheme holds the EgressIP types; Client encodes and decodes with it.
var Scheme = runtime.NewScheme()

// Codecs serializes the types in Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

func init() {
	if err := AddToScheme(Scheme); err != nil {
		panic(fmt.Sprintf("registering %s: %v", SchemeGroupVersion, err)) // programming error, at init only
	}
}

// Client is a typed client for EgressIP objects, built on client-go's REST
// client (the same machinery generated clientsets use); Traffic gives the
// one for EgressIPTraffic objects over the same REST client.
type Client struct {
	rc rest.Interface
}

// NewForConfig returns a Client for the apiserver in cfg; cfg is not changed.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &SchemeGroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("building the %s client: %w", SchemeGroupVersion, err)
	}
	return &Client{rc: rc}, nil
}

// RESTClient returns the underlying REST client.
func (c *Client) RESTClient() rest.Interface { return c.rc }

// Get reads the EgressIP called name.
func (c *Client) Get(ctx context.Context, name string, opts metav1.GetOptions) (*EgressIP, error) {
	out := &EgressIP{}
	err := c.rc.Get().Resource(Resource).Name(name).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// List reads the EgressIPs that match opts.
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*EgressIPList, error) {
	out := &EgressIPList{}
	err := c.rc.Get().Resource(Resource).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch streams changes to the EgressIPs that match opts.
func (c *Client) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rc.Get().Resource(Resource).
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// Create stores a new EgressIP.
func (c *Client) Create(ctx context.Context, e *EgressIP, opts metav1.CreateOptions) (*EgressIP, error) {
	out := &EgressIP{}
	err := c.rc.Post().Resource(Resource).
		VersionedParams(&opts, metav1.ParameterCodec).Body(e).Do(ctx).Into(out)
	return out, err
}

// Update replaces an EgressIP, status included: the CRD has no status
// subresource, so this is also how status is written.
func (c *Client) Update(ctx context.Context, e *EgressIP, opts metav1.UpdateOptions) (*EgressIP, error) {
	out := &EgressIP{}
	err := c.rc.Put().Resource(Resource).Name(e.Name).
		VersionedParams(&opts, metav1.ParameterCodec).Body(e).Do(ctx).Into(out)
	return out, err
}

// Patch applies a patch of type pt to the EgressIP called name.
func (c *Client) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions) (*EgressIP, error) {
	out := &EgressIP{}
	err := c.rc.Patch(pt).Resource(Resource).Name(name).
		VersionedParams(&opts, metav1.ParameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}

// Delete removes the EgressIP called name.
func (c *Client) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.rc.Delete().Resource(Resource).Name(name).Body(&opts).Do(ctx).Error()
}

// ListWatch returns a ListerWatcher over all EgressIPs, for informers:
// cache.NewSharedIndexInformer(c.ListWatch(), &EgressIP{}, resync, indexers).
func (c *Client) ListWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, opts)
		},
	}
}

// Traffic returns the typed client for EgressIPTraffic objects, which
// shares c's REST client (same group and version, same connection).
func (c *Client) Traffic() *TrafficClient { return &TrafficClient{rc: c.rc} }

// TrafficClient is a typed client for EgressIPTraffic objects. Unlike
// EgressIP, the CRD has a status subresource: Update leaves status alone,
// UpdateStatus writes only status.
type TrafficClient struct {
	rc rest.Interface
}

// Get reads the EgressIPTraffic called name.
func (c *TrafficClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*EgressIPTraffic, error) {
	out := &EgressIPTraffic{}
	err := c.rc.Get().Resource(TrafficResource).Name(name).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// List reads the EgressIPTraffic objects that match opts.
func (c *TrafficClient) List(ctx context.Context, opts metav1.ListOptions) (*EgressIPTrafficList, error) {
	out := &EgressIPTrafficList{}
	err := c.rc.Get().Resource(TrafficResource).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch streams changes to the EgressIPTraffic objects that match opts.
func (c *TrafficClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rc.Get().Resource(TrafficResource).
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// Create stores a new EgressIPTraffic; the API server drops its status.
func (c *TrafficClient) Create(ctx context.Context, t *EgressIPTraffic, opts metav1.CreateOptions) (*EgressIPTraffic, error) {
	out := &EgressIPTraffic{}
	err := c.rc.Post().Resource(TrafficResource).
		VersionedParams(&opts, metav1.ParameterCodec).Body(t).Do(ctx).Into(out)
	return out, err
}

// Update replaces an EgressIPTraffic's metadata and spec; the API server
// keeps the stored status.
func (c *TrafficClient) Update(ctx context.Context, t *EgressIPTraffic, opts metav1.UpdateOptions) (*EgressIPTraffic, error) {
	out := &EgressIPTraffic{}
	err := c.rc.Put().Resource(TrafficResource).Name(t.Name).
		VersionedParams(&opts, metav1.ParameterCodec).Body(t).Do(ctx).Into(out)
	return out, err
}

// UpdateStatus replaces an EgressIPTraffic's status through the status
// subresource; the API server keeps the stored metadata and spec.
func (c *TrafficClient) UpdateStatus(ctx context.Context, t *EgressIPTraffic, opts metav1.UpdateOptions) (*EgressIPTraffic, error) {
	out := &EgressIPTraffic{}
	err := c.rc.Put().Resource(TrafficResource).Name(t.Name).SubResource("status").
		VersionedParams(&opts, metav1.ParameterCodec).Body(t).Do(ctx).Into(out)
	return out, err
}

// Delete removes the EgressIPTraffic called name.
func (c *TrafficClient) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.rc.Delete().Resource(TrafficResource).Name(name).Body(&opts).Do(ctx).Error()
}

// ListWatch returns a ListerWatcher over all EgressIPTraffic objects, for
// informers.
func (c *TrafficClient) ListWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, opts)
		},
	}
}
