/* writeset.c: placeholder until the row trigger lands. */
#include "tashkent.h"

void
tk_writeset_encode(List *events, StringInfo out)
{
}
