# The --ulimit options for podman on a machine where a process cannot raise its limits
# (no CAP_SYS_RESOURCE): the shell's own open-files limit, and its process limit but at most
# 32768, the limit podman gives conmon, the parent of the container's runtime, which a container
# may not exceed. Sourced by build-image.sh; tests/support/image.py does the same in Python.
podman_ulimits() {
  local nofile nproc
  nofile=$(ulimit -n)
  nproc=$(ulimit -u)
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
  if [ "$nofile" = unlimited ]; then nofile=1048576; fi
  echo "--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
}
