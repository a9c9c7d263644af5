package main

import (
	"fmt"
	"strings"

	"amspc/runtime/cudalib"
)

// cudaStatus says why --device cuda cannot run: CUDA's libraries are
// missing (one sentence naming the first), or they load and the backend
// that would run plans on them is not written yet.
func cudaStatus() error {
	l, err := cudalib.Load()
	if err != nil {
		return err
	}
	devs, err := l.Devices()
	if err != nil {
		return fmt.Errorf("CUDA loads (%v) but its devices cannot be listed: %v", l, err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.String())
	}
	return fmt.Errorf("the CUDA backend does not run plans yet (CUDA loads: %v; %s); --device cpu runs them", l, strings.Join(names, "; "))
}
