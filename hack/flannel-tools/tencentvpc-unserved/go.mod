// The Tencent Cloud VPC SDK that flannel's tencent-vpc backend imports is not
// served by the Go module proxy this project builds from. This module stands
// in for it so flanneld links: every call fails, so that backend cannot be
// used in this build. `make cluster-up CLUSTER_CNI=flannel` uses the vxlan
// backend, which is flannel's own code throughout.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.26
