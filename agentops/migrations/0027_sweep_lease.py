from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agentops", "0026_read_call_recorded_after")]
    operations = [
        migrations.CreateModel(
            name="SweepLease",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("holder", models.CharField(blank=True, max_length=200)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
