package main

import "github.com/nlx-dev/nlx/provider"

// adapters are the provider programs nlx can drive, by kind.
func adapters() map[provider.Kind]provider.Adapter {
	return map[provider.Kind]provider.Adapter{}
}
