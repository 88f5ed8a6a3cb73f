//go:build !race

package certgroup_test

const raceBuild = false
