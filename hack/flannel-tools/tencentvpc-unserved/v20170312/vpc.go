// Package v20170312 has the names flannel's tencent-vpc backend uses, and
// nothing behind them (see go.mod).
package v20170312

import "errors"

var errUnserved = errors.New("tencent-vpc: the Tencent Cloud SDK is not part of this flanneld build")

// Client refuses every call.
type Client struct{}

// NewClientWithSecretId returns a Client that refuses every call.
func NewClientWithSecretId(id, secret, region string) (*Client, error) { return &Client{}, errUnserved }

// Filter is a DescribeRouteTables filter.
type Filter struct {
	Name   *string
	Values []*string
}

// Route is one route of a route table.
type Route struct {
	DestinationCidrBlock, GatewayType, GatewayId, RouteType *string
	RouteId                                                 *uint64
	Enabled                                                 *bool
}

// RouteTable is one route table.
type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

// DescribeRouteTablesRequest asks for route tables.
type DescribeRouteTablesRequest struct{ Filters []*Filter }

// DescribeRouteTablesResponse answers it.
type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

// DeleteRoutesRequest deletes routes.
type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// CreateRoutesRequest creates routes.
type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// NewDescribeRouteTablesRequest returns an empty request.
func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}

// NewDeleteRoutesRequest returns an empty request.
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }

// NewCreateRoutesRequest returns an empty request.
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

// DescribeRouteTables fails.
func (*Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, errUnserved
}

// DeleteRoutes fails.
func (*Client) DeleteRoutes(*DeleteRoutesRequest) (struct{}, error) { return struct{}{}, errUnserved }

// CreateRoutes fails.
func (*Client) CreateRoutes(*CreateRoutesRequest) (struct{}, error) { return struct{}{}, errUnserved }
