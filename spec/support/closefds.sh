#!/bin/bash
# closefds.sh CMD...: runs CMD without the descriptors above 2 that this
# shell inherited (a spec's sockets, the write end of a popen'd peer's
# stdin). A long-lived child holding such a pipe end keeps the peer from
# seeing EOF: a spec closing that peer's pipe then waits in pclose() until
# the child ends. (255: bash's own script descriptor, close-on-exec; the
# loop has no redirection: bash would park stderr on a descriptor the loop
# then closes, and CMD would start without one.)
for f in /proc/$$/fd/*; do
  n=${f##*/}
  if [ "$n" -gt 2 ] && [ "$n" != 255 ] && [ -e "/proc/$$/fd/$n" ]; then eval "exec $n>&-"; fi
done
exec "$@"
