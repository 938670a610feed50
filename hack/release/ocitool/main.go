// Command ocitool does the two OCI steps of `make release` (hack/release/release.sh)
// that neither buildah nor helm does alone:
//
//	ocitool chart -helm HELM -out DIR CHART.tgz
//	ocitool index -ref REF -out FILE ARCHIVE.oci.tar
//
// chart writes the packaged chart as Helm's OCI artifact into the OCI image layout DIR:
// helm itself pushes it (so the manifest, config and media types are Helm's own) to a
// registry that lives in this process on loopback, and the artifact is copied from there
// into the layout; nothing leaves the machine. index writes the image index that REF
// names in the OCI archive to FILE, the bytes whose digest is the image's and which the
// release signs.
package main

import (
	"context"
	"errors"
	"log"
	"os"
	"time"
)

const usage = `usage: ocitool chart -helm HELM -out DIR CHART.tgz
       ocitool index -ref REF -out FILE ARCHIVE.oci.tar`

func main() {
	log.SetFlags(0)
	log.SetPrefix("ocitool: ")
	if len(os.Args) < 2 {
		log.Fatal(usage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "chart":
		err = runChart(ctx, os.Args[2:])
	case "index":
		err = runIndex(ctx, os.Args[2:])
	default:
		err = errors.New(usage)
	}
	if err != nil {
		log.Fatal(err)
	}
}
