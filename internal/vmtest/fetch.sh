#!/bin/sh
# Fetches what the VM tests boot, pinned by exact Debian package version,
# into DIR (default .vm): the kernels (taken out of their packages, never
# installed) and, for the arm64 guest, busybox and bubblewrap with their
# libraries. make vm runs it; .ci/run calls make vm.
set -eu
dir=${1:-.vm}
# Debian 12's cloud kernels: memcg, pids, CFS bandwidth, user namespaces,
# the serial console and initramfs support built in, no modules needed.
kver=6.1.0-57
kpkg=6.1.192-3
mkdir -p "$dir/amd64" "$dir/arm64" "$dir/debs"
dir=$(cd "$dir" && pwd)

kernel() { # ARCH CONSOLE-ARCH
	arch=$1
	out="$dir/$arch/vmlinuz"
	[ -s "$out" ] && return 0
	deb=$(ls "$dir/debs"/linux-image-$kver-cloud-${arch}_${kpkg}_$arch.deb 2>/dev/null || true)
	if [ -z "$deb" ]; then
		(cd "$dir/debs" && apt-get $aptarch download "linux-image-$kver-cloud-$arch:$arch=$kpkg")
		deb=$(ls "$dir/debs"/linux-image-$kver-cloud-${arch}_${kpkg}_$arch.deb)
	fi
	dpkg-deb --fsys-tarfile "$deb" | tar -xO "./boot/vmlinuz-$kver-cloud-$arch" > "$out.tmp"
	mv "$out.tmp" "$out"
}

# amd64: this machine's own apt; the guest's busybox (bubblewrap and runc
# come from the host, with their libraries).
aptarch=""
kernel amd64
if [ ! -x "$dir/amd64/root/bin/busybox" ]; then
	rm -rf "$dir/amd64/root" "$dir/amd64/debs"
	mkdir -p "$dir/amd64/root" "$dir/amd64/debs"
	(cd "$dir/amd64/debs" && apt-get download busybox-static)
	dpkg-deb -x "$dir/amd64/debs"/busybox-static_*.deb "$dir/amd64/root"
fi

# arm64: a private apt state for that architecture, so that the host's own
# dpkg is never told about arm64.
st="$dir/apt-arm64"
mkdir -p "$st/lists/partial" "$st/cache/archives/partial" "$st/etc/apt/sources.list.d"
: > "$st/status"
# Debian 12's own archive, as the host's (deb.debian.org).
cat > "$st/etc/apt/sources.list.d/debian.list" <<EOS
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOS
aptarch="-o APT::Architecture=arm64 -o APT::Architectures=arm64 -o Dir::State=$st -o Dir::State::status=$st/status -o Dir::Cache=$st/cache -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$st/etc/apt/sources.list.d"
if [ ! -s "$dir/arm64/vmlinuz" ] || [ ! -d "$dir/arm64/root/usr/bin" ]; then
	apt-get $aptarch -q update >/dev/null
fi
kernel arm64
if [ ! -x "$dir/arm64/root/bin/busybox" ] || [ ! -x "$dir/arm64/root/usr/bin/bwrap" ]; then
	rm -rf "$dir/arm64/root" "$dir/arm64/debs"
	mkdir -p "$dir/arm64/root" "$dir/arm64/debs"
	(cd "$dir/arm64/debs" && apt-get $aptarch download busybox-static bubblewrap libc6 libcap2 libselinux1 libpcre2-8-0)
	for d in "$dir/arm64/debs"/*.deb; do dpkg-deb -x "$d" "$dir/arm64/root"; done
fi
echo "vm: kernels and the arm64 userland are in $dir"
