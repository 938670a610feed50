package dist

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// EgretBinary returns the egret binary a benchmark runs: given, if set,
// else one built from ./cmd/egret into dir (the command must run from the
// repository's root).
func EgretBinary(given, dir string) (string, error) {
	if given != "" {
		return given, nil
	}
	bin := filepath.Join(dir, "egret")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/egret").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/egret (run from the repository's root): %v\n%s", err, out)
	}
	return bin, nil
}
