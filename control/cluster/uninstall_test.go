package cluster

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestDaemonSetGone(t *testing.T) {
	now := metav1.Now()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "egret-steer", Namespace: "egret-system", UID: "ds-1"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "egret-steer-x", Namespace: "egret-system",
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "egret-steer", UID: "ds-1"}}}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "egret-system"}}
	nsDeleting := ns.DeepCopy()
	nsDeleting.DeletionTimestamp = &now
	nsDeleting.Finalizers = []string{"kubernetes"}
	deleting := ds.DeepCopy()
	deleting.DeletionTimestamp = &now
	deleting.Finalizers = []string{"foregroundDeletion"}
	replaced := ds.DeepCopy()
	replaced.UID = "ds-2"
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "egret-steer-x", errors.New("no"))
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		failGet error
		want    bool
		wantErr bool
	}{
		{name: "rolling update: DaemonSet in place", objs: []runtime.Object{ns, ds, pod}, want: false},
		{name: "DaemonSet deleted", objs: []runtime.Object{ns, pod}, want: true},
		{name: "DaemonSet being deleted (foreground)", objs: []runtime.Object{ns, deleting, pod}, want: true},
		{name: "DaemonSet replaced by another of the same name", objs: []runtime.Object{ns, replaced, pod}, want: true},
		{name: "namespace being deleted, DaemonSet still there", objs: []runtime.Object{nsDeleting, ds, pod}, want: true},
		{name: "RBAC removed with it", objs: []runtime.Object{ns, ds, pod}, failGet: forbidden, want: true},
		{name: "API unavailable keeps the state", objs: []runtime.Object{ns, ds, pod}, failGet: apierrors.NewServiceUnavailable("down"), want: false, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewSimpleClientset(tc.objs...)
			if tc.failGet != nil {
				cs.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.failGet })
			}
			got, err := daemonSetGone(context.Background(), cs, "egret-system", "egret-steer-x")
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("daemonSetGone = %v, %v; want %v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
