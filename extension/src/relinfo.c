/* relinfo.c: placeholder until the row trigger lands. */
#include "tashkent.h"
