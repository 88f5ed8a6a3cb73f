#!/bin/sh
# Issues the TLS files of a tashkent cluster with openssl: a CA, and per
# host a certificate for its certifier group member (certifier-K), its
# agent (replicaK) and its PostgreSQL server (postgresql); one more for the
# tools (admin). ECDSA P-256, valid for both server and client use.
#
#   deploy/make-certs.sh OUT HOST1 HOST2 HOST3
#
# HOSTK is host K's address, or several names and addresses separated by
# commas (10.0.0.1,db1.example.net): the certificates of host K are valid
# for each. OUT gets ca.crt and ca.key (keep ca.key off the cluster), and
# per host a directory hostK/ with what goes into that host's
# /etc/tashkent/tls/; admin/ holds the tools' files. Existing files are
# kept, so running it again with one more host adds that host only.
# docs/DEPLOYMENT.md, "TLS".
set -eu

if [ $# -lt 2 ]; then
	echo "usage: $0 OUT HOST1 [HOST2 ...]   (HOST: address[,name...])" >&2
	exit 2
fi
out=$1
shift
days=3650
umask 077
mkdir -p "$out"

# san turns "10.0.0.1,db1" into "IP:10.0.0.1,DNS:db1".
# Addresses (IPv4 digits and dots, or IPv6 with colons) become IP names.
san() {
	echo "$1" | tr ',' '\n' | while read -r h; do
		case "$h" in
		"") ;;
		*:*) echo "IP:$h" ;;
		*[!0-9.]*) echo "DNS:$h" ;;
		*) echo "IP:$h" ;;
		esac
	done | paste -sd, -
}

if [ ! -f "$out/ca.crt" ]; then
	openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$out/ca.key" -out "$out/ca.crt" -days "$days" -subj "/O=tashkent/CN=tashkent cluster CA" \
		-addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	chmod 0644 "$out/ca.crt"
fi

# issue DIR NAME SAN: DIR/NAME.crt and DIR/NAME.key (mode 0600), and a copy
# of the CA certificate in DIR.
issue() {
	dir=$1 name=$2 alt=$3
	mkdir -p "$dir"
	chmod 0755 "$dir"
	cp "$out/ca.crt" "$dir/ca.crt"
	chmod 0644 "$dir/ca.crt"
	[ -f "$dir/$name.crt" ] && return 0
	ext=$(mktemp)
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		if [ -n "$alt" ]; then echo "subjectAltName=$alt"; fi
	} >"$ext"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "/O=tashkent/CN=$name" 2>/dev/null
	openssl x509 -req -in "$dir/$name.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
	rm -f "$dir/$name.csr" "$ext"
	chmod 0644 "$dir/$name.crt"
	chmod 0600 "$dir/$name.key"
}

k=0
for host in "$@"; do
	k=$((k + 1))
	alt=$(san "$host")
	issue "$out/host$k" "certifier-$k" "$alt"
	issue "$out/host$k" "replica$k" "$alt"
	issue "$out/host$k" postgresql "$alt"
done
issue "$out/admin" admin ""
echo "$out: ca.crt, ca.key (keep it off the cluster), host1..host$k/, admin/"
