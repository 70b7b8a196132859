"""A role swap's reservation against its source pool's floor, on the node's lease.

Two swaps out of one pool each checked the floor alone and could both pass;
the reservation is taken in the transaction that checks it and counted by
every later check. Revision 0005, after 0004; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('racklife_leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('leaving_pool', sa.String(length=63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('racklife_leases', schema=None) as batch_op:
        batch_op.drop_column('leaving_pool')
