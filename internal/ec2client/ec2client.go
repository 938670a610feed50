// Package ec2client builds the AWS SDK clients Egret's AWS code uses (EC2 and
// the instance metadata service) from the SDK's default chain, and reads
// instance metadata. Two callers share it: the controller's cloud provider
// (control/cloud) and the egress-router plugin's aws-elastic-ip interface
// type (cni), which must not pull the controller's packages into the plugin.
package ec2client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Load builds the clients from the SDK's default chain: credentials from the
// environment, web identity or the instance role; the region from AWS_REGION
// or the instance metadata service. AWS_ENDPOINT_URL_EC2 and
// AWS_EC2_METADATA_SERVICE_ENDPOINT point them elsewhere, as for any SDK.
func Load(ctx context.Context) (*ec2.Client, *imds.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithEC2IMDSRegion())
	if err != nil {
		return nil, nil, fmt.Errorf("loading the AWS configuration (credentials, region): %w", err)
	}
	if cfg.Region == "" {
		return nil, nil, errors.New("no AWS region: set AWS_REGION or run on an EC2 instance whose metadata service answers")
	}
	return ec2.NewFromConfig(cfg), imds.NewFromConfig(cfg), nil
}

// Metadata reads one path of the instance metadata (under meta-data/),
// trimmed of surrounding space.
func Metadata(ctx context.Context, c *imds.Client, path string) (string, error) {
	out, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", fmt.Errorf("reading %s from the instance metadata service: %w", path, err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 64<<10))
	if err != nil {
		return "", fmt.Errorf("reading %s from the instance metadata service: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}
