package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
)

// runIndex is `ocitool index`: see the package comment.
func runIndex(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("index", flag.ContinueOnError)
	ref := fs.String("ref", "", "the image's name in the archive (its org.opencontainers.image.ref.name)")
	out := fs.String("out", "", "the file to write the image index to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *ref == "" || *out == "" {
		return fmt.Errorf("index: want -ref REF -out FILE and one OCI archive, got %q", args)
	}
	store, err := oci.NewFromTar(ctx, fs.Arg(0))
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	desc, err := store.Resolve(ctx, *ref)
	if err != nil {
		return fmt.Errorf("index: %s in %s: %w", *ref, fs.Arg(0), err)
	}
	if desc.MediaType != ocispec.MediaTypeImageIndex {
		return fmt.Errorf("index: %s in %s is a %s, not an image index (%s)", *ref, fs.Arg(0), desc.MediaType, ocispec.MediaTypeImageIndex)
	}
	// FetchAll checks the bytes against the descriptor's size and digest.
	b, err := content.FetchAll(ctx, store, desc)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	fmt.Printf("%s: image index %s\n", *out, desc.Digest)
	return nil
}
