//go:build !race

package api_test

const raced = false
