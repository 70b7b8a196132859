"""The pool whose scheduler a node's last observation shows it out of (``racklife_observations.out_of_pool``).

Revision 0010, after 0009; created 2026-12-03. Observations stored before it read as serving (NULL):
the store's state stands for them until the next refresh, as for a node never observed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('racklife_observations') as batch:
        batch.add_column(sa.Column('out_of_pool', sa.String(length=63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('racklife_observations') as batch:
        batch.drop_column('out_of_pool')
