package v1

import (
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// Deep copies written by hand: the types are small, and a generator would
// add a build step for a handful of structs. TestDeepCopyIndependent guards them.

// DeepCopyInto copies in into out, sharing no memory.
func (in *EgressIP) DeepCopyInto(out *EgressIP) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns an independent copy of in.
func (in *EgressIP) DeepCopy() *EgressIP {
	if in == nil {
		return nil
	}
	out := new(EgressIP)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *EgressIP) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies in into out, sharing no memory.
func (in *EgressIPSpec) DeepCopyInto(out *EgressIPSpec) {
	*out = *in
	if in.EgressIPs != nil {
		out.EgressIPs = make([]string, len(in.EgressIPs))
		copy(out.EgressIPs, in.EgressIPs)
	}
	in.NamespaceSelector.DeepCopyInto(&out.NamespaceSelector)
	in.PodSelector.DeepCopyInto(&out.PodSelector)
	if in.TrafficSelector != nil {
		out.TrafficSelector = in.TrafficSelector.DeepCopy()
	}
}

// DeepCopy returns an independent copy of in.
func (in *EgressIPSpec) DeepCopy() *EgressIPSpec {
	if in == nil {
		return nil
	}
	out := new(EgressIPSpec)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies in into out, sharing no memory.
func (in *EgressIPStatus) DeepCopyInto(out *EgressIPStatus) {
	*out = *in
	if in.Items != nil {
		out.Items = make([]EgressIPStatusItem, len(in.Items))
		copy(out.Items, in.Items) // items hold only strings
	}
}

// DeepCopy returns an independent copy of in.
func (in *EgressIPStatus) DeepCopy() *EgressIPStatus {
	if in == nil {
		return nil
	}
	out := new(EgressIPStatus)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies in into out, sharing no memory.
func (in *EgressIPList) DeepCopyInto(out *EgressIPList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]EgressIP, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns an independent copy of in.
func (in *EgressIPList) DeepCopy() *EgressIPList {
	if in == nil {
		return nil
	}
	out := new(EgressIPList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *EgressIPList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies in into out, sharing no memory.
func (in *EgressIPTraffic) DeepCopyInto(out *EgressIPTraffic) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.DestinationNetworks = slices.Clone(in.Spec.DestinationNetworks)
	out.Spec.DNSNames = slices.Clone(in.Spec.DNSNames)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopyInto copies in into out, sharing no memory.
func (in *EgressIPTrafficStatus) DeepCopyInto(out *EgressIPTrafficStatus) {
	*out = EgressIPTrafficStatus{}
	if in.DNSNames != nil {
		out.DNSNames = make([]ResolvedName, len(in.DNSNames))
		for i, r := range in.DNSNames {
			r.Addresses = slices.Clone(r.Addresses)
			r.ResolvedAt = *r.ResolvedAt.DeepCopy()
			r.NextResolution = *r.NextResolution.DeepCopy()
			out.DNSNames[i] = r
		}
	}
}

// DeepCopy returns an independent copy of in.
func (in *EgressIPTrafficStatus) DeepCopy() *EgressIPTrafficStatus {
	if in == nil {
		return nil
	}
	out := new(EgressIPTrafficStatus)
	in.DeepCopyInto(out)
	return out
}

// DeepCopy returns an independent copy of in.
func (in *EgressIPTraffic) DeepCopy() *EgressIPTraffic {
	if in == nil {
		return nil
	}
	out := new(EgressIPTraffic)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *EgressIPTraffic) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies in into out, sharing no memory.
func (in *EgressIPTrafficList) DeepCopyInto(out *EgressIPTrafficList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]EgressIPTraffic, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns an independent copy of in.
func (in *EgressIPTrafficList) DeepCopy() *EgressIPTrafficList {
	if in == nil {
		return nil
	}
	out := new(EgressIPTrafficList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *EgressIPTrafficList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}
